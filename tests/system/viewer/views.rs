//! The trace page's views (timeline, cost, branch graph, files, approvals)
//! and its actions, on one trace made by real runs: the `openai` plugin
//! against a local server speaking its protocol, so that a model call can
//! fail and be retried. The trace holds a failed-then-retried model call,
//! an edit leaving a checkpoint diff, an asked-for call answered through
//! the API, an image, a sub-agent, and (after the page's rewind) two
//! branches. Each view is checked against the API's numbers and kept as a
//! screenshot under `target/viewer/`.

use super::{Served, WAIT, assert_no_problems};
use crate::support;
use crate::support::chromium::{Chromium, Watched};
use crate::support::llm_server::{LlmServer, openai};
use serde_json::{Value, json};
use std::time::Duration;
use support::TestDir;

/// `reson serve` on the `openai` plugin pointed at `llm`, with `fs` on a
/// workspace holding `notes.txt`, `echo` asking first, and the `picture`
/// test guest.
async fn serve(llm: &LlmServer) -> Served {
    let dir = TestDir::new();
    for name in ["openai", "echo", "fs"] {
        dir.install(support::plugins(), name);
    }
    dir.install(support::test_plugins(), "picture");
    std::fs::write(dir.workspace().join("notes.txt"), "hello\n").unwrap();
    let toml = format!(
        r#"
        [permissions]
        rules = [
            {{ decision = "allow", tool = "{{edit,picture,agent}}" }},
            {{ decision = "ask", tool = "echo" }},
        ]
        [secrets]
        OPENAI_API_KEY = "sk-viewer-test"
        [plugins.openai]
        http = ["{addr}"]
        secrets = ["OPENAI_API_KEY"]
        config = {{ base_url = "{url}/v1", price_input_per_mtok = "1000", price_output_per_mtok = "2000" }}
        [plugins.fs]
        dirs = [{{ path = "workspace", access = "read-write" }}]
        "#,
        addr = llm.addr,
        url = llm.url(),
    );
    Served::serve_config(dir, "127.0.0.1:0".parse().unwrap(), None, &toml).await
}

/// Runs the first run to its end, answering the one approval through the
/// API; the trace id.
async fn first_run(served: &Served) -> String {
    let id = served
        .start_run(json!({
            "messages": [{ "role": "user", "content": "tidy the notes" }],
            "provider": "openai",
            "model": "gpt-test",
            "budget": { "max_tokens": 100000, "max_cost_usd": 5.0 },
        }))
        .await;
    let deadline = tokio::time::Instant::now() + WAIT;
    let approval = loop {
        let pending = served.get("/api/approvals").await;
        if let Some(first) = pending["approvals"].as_array().unwrap().first() {
            break first.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "no approval was asked for");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(approval["tool"], "echo");
    // Long enough a wait to show on the timeline.
    tokio::time::sleep(Duration::from_millis(150)).await;
    served
        .post(
            &format!("/api/approvals/{}", approval["id"].as_str().unwrap()),
            json!({ "answer": "once" }),
        )
        .await;
    assert_eq!(served.finished(&id, 0).await, "completed");
    served.idle(&id).await;
    id
}

/// The rows of the timeline: (kind, message sequence or 0, start).
async fn timeline_rows(page: &Watched, selector: &str) -> Vec<(String, u64, u64)> {
    page.eval(&format!(
        "[...document.querySelectorAll('{selector}')].map(r => [r.dataset.kind, Number(r.dataset.seq || 0), Number(r.dataset.start)])"
    ))
    .await
}

/// Clicks `selector`, then confirms the page's question, after `fill`
/// (JavaScript) has filled it in.
async fn confirmed(page: &Watched, selector: &str, fill: &str) {
    page.click(selector).await;
    page.wait_for(
        "document.getElementById('confirm-dialog').open",
        "the question before the action",
    )
    .await;
    page.eval::<bool>(&format!("({fill}, true)")).await;
    page.click("#confirm-ok").await;
    page.wait_for("!document.getElementById('confirm-dialog').open", "the question closed").await;
}

async fn show_tab(page: &Watched, name: &str) {
    page.click(&format!("#tab-button-{name}")).await;
    page.wait_for(&format!("!document.getElementById('tab-{name}').hidden && document.getElementById('tab-{name}').dataset.drawn"), name)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_views_show_timeline_costs_branches_files_and_decisions_and_the_actions_work() {
    let llm = LlmServer::start(vec![
        openai::error(500, "the model is overloaded"),
        openai::tool_call(
            "call_edit",
            "edit",
            json!({ "path": "notes.txt", "old_string": "hello", "new_string": "bonjour" }),
        ),
        openai::tool_call("call_echo", "echo", json!({ "text": "may I?" })),
        openai::tool_call(
            "call_picture",
            "picture",
            json!({ "caption": "the page", "images": ["red"] }),
        ),
        openai::tool_call("call_agent", "agent", json!({ "task": "check the notes" })),
        openai::text("the notes say bonjour", 20, 6),
        openai::text("all tidy", 40, 8),
        // The page's rewind, regenerate and continue (slow: stopped).
        openai::text("starting over", 12, 3),
        openai::text("starting over, again", 12, 4),
        openai::text("this answer never arrives", 1, 1).paced(Duration::from_secs(60)),
    ]);
    let served = serve(&llm).await;
    let id = first_run(&served).await;
    let ws = served.dir.workspace();
    assert_eq!(std::fs::read_to_string(ws.join("notes.txt")).unwrap(), "bonjour\n");

    // The API's own record of the failed attempt and the decisions.
    let failed = served.get(&format!("/api/traces/{id}/events?kinds=model_failed")).await;
    let failed = failed["events"].as_array().unwrap();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(
        (failed[0]["attempt"].as_u64(), failed[0]["retrying"].as_bool()),
        (Some(1), Some(true))
    );
    assert!(failed[0]["error"].as_str().unwrap().contains("overloaded"), "{failed:?}");
    let decisions = served.get(&format!("/api/traces/{id}/events?kinds=permission_decided")).await;
    let decisions = decisions["events"].as_array().unwrap().clone();
    let echo = decisions.iter().find(|d| d["tool"] == "echo").expect("the echo decision");
    assert_eq!(
        (echo["decision"].as_str(), echo["answered_by"].as_str()),
        (Some("ask-once"), Some("the API"))
    );
    assert!(echo["waited_ms"].as_u64().unwrap() >= 150, "{echo}");
    let bad = served
        .request(
            reqwest::Method::GET,
            &format!("/api/traces/{id}/events?kinds=tool_started,nonsense"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    assert!(bad.text().await.unwrap().contains("model_failed"), "the error lists the kinds");

    let browser = Chromium::launch().await;
    let page = browser.page().await;
    page.open(&format!("{}/#/traces/{id}", served.base)).await;
    page.wait_for("document.getElementById('trace-view').dataset.loaded === 'true'", "the trace")
        .await;

    // Files: the edit's diff, as the API gives it.
    let checkpoints = served.get(&format!("/api/traces/{id}/checkpoints")).await;
    let edit = checkpoints["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["cause"]["kind"] == "calls")
        .expect("a checkpoint of the edit")
        .clone();
    let patch = edit["files"][0]["patch"].as_str().expect("a text diff").to_owned();
    assert!(patch.contains("-hello") && patch.contains("+bonjour"), "{patch}");
    show_tab(&page, "files").await;
    let shown: Value = page
        .eval(&format!(
            "(c => ({{ path: c.querySelector('li').dataset.path, change: c.querySelector('li').dataset.change,
                diff: c.querySelector('pre.diff').textContent,
                added: [...c.querySelectorAll('.diff-add')].map(l => l.textContent),
                removed: [...c.querySelectorAll('.diff-del')].map(l => l.textContent) }}))
             (document.querySelector('.checkpoint[data-key=\"{}\"]'))",
            edit["key"].as_str().unwrap()
        ))
        .await;
    assert_eq!(
        shown,
        json!({ "path": "notes.txt", "change": "modified", "diff": format!("{patch}\n"),
                "added": ["+bonjour\n"], "removed": ["-hello\n"] })
    );
    page.screenshot("view-files").await;

    // The run's budget, against what it spent.
    show_tab(&page, "costs").await;
    let totals = &served.get(&format!("/api/traces/{id}")).await["trace"]["totals"];
    let spent = totals["usage"]["prompt_tokens"].as_f64().unwrap()
        + totals["usage"]["completion_tokens"].as_f64().unwrap();
    let budget: Vec<(String, f64, f64)> = page
        .eval("[...document.querySelectorAll('#budget [data-limit]')].map(l => [l.dataset.limit, l.querySelector('meter').value, l.querySelector('meter').max])")
        .await;
    assert_eq!(
        budget,
        vec![
            ("tokens".to_owned(), spent, 100000.0),
            ("cost".to_owned(), totals["cost"].as_f64().unwrap(), 5.0)
        ]
    );
    page.screenshot("view-budget").await;

    // The rewind, restoring the files: asked first, then the API's run.
    show_tab(&page, "messages").await;
    let since = served.last_event(&id).await;
    confirmed(&page, "#messages [data-rewind='1']", "document.getElementById('confirm-input').value = 'start over', document.getElementById('confirm-check').checked = true").await;
    assert_eq!(served.finished(&id, since).await, "completed");
    served.idle(&id).await;
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.txt")).unwrap(),
        "hello\n",
        "the files were restored"
    );
    let messages = served.messages(&id).await;
    let head =
        served.get(&format!("/api/traces/{id}")).await["trace"]["head_sequence"].as_u64().unwrap();
    let start_over = super::sequence_of(&messages, "user", "start over");
    assert_eq!(
        messages.iter().find(|m| m["sequence"] == start_over).unwrap()["parent_sequence"],
        1
    );
    page.wait_for(
        &format!("document.querySelector('#messages [data-seq=\"{head}\"]')"),
        "the rewind's answer, live",
    )
    .await;

    // Timeline: a bar per model call, failed attempt, tool call, approval
    // wait and sub-agent, with the sub-agent's own call nested under it.
    let detail = served.get(&format!("/api/traces/{id}")).await;
    let answers: Vec<&Value> = messages.iter().filter(|m| m["role"] == "assistant").collect();
    let sub = &detail["sub_traces"][0];
    let sub_id = sub["id"].as_str().expect("a sub-trace");
    show_tab(&page, "timeline").await;
    page.wait_for("document.querySelectorAll('.tl-row[data-kind=\"model\"]:not([data-parent-trace])').length === 6", "every model call's bar").await;
    let rows =
        timeline_rows(&page, ".tl-row:not(.tl-goal):not(.tl-axis):not([data-parent-trace])").await;
    let count = |kind: &str| rows.iter().filter(|r| r.0 == kind).count();
    assert_eq!(
        [count("model"), count("attempt"), count("tool"), count("approval"), count("agent")],
        [answers.len(), 1, 4, 1, 1],
        "{rows:?}"
    );
    let model_seqs: Vec<u64> = rows.iter().filter(|r| r.0 == "model").map(|r| r.1).collect();
    let mut by_time: Vec<&&Value> = answers.iter().collect();
    by_time.sort_by_key(|m| (m["created_at_ms"].as_u64(), m["sequence"].as_u64()));
    assert_eq!(
        model_seqs,
        by_time.iter().map(|m| m["sequence"].as_u64().unwrap()).collect::<Vec<_>>(),
        "model bars in time order"
    );
    let position = |kind: &str| rows.iter().position(|r| r.0 == kind).unwrap();
    assert!(position("attempt") < position("model"), "the failed attempt comes first: {rows:?}");
    assert!(rows.windows(2).all(|w| w[0].2 <= w[1].2), "bars in start order: {rows:?}");
    let nested: Vec<(String, String)> = page
        .eval("[...document.querySelectorAll('.tl-row[data-parent-trace]')].map(r => [r.dataset.kind, r.dataset.parentTrace])")
        .await;
    assert_eq!(nested, vec![("model".to_owned(), sub_id.to_owned())]);
    page.screenshot("view-timeline").await;
    // A bar leads to its message.
    page.click(".tl-row[data-kind='approval']").await;
    let echo_result =
        messages.iter().find(|m| m["tool_call_id"] == "call_echo").unwrap()["sequence"]
            .as_u64()
            .unwrap();
    page.wait_for(&format!("!document.getElementById('tab-messages').hidden && document.querySelector('#messages [data-seq=\"{echo_result}\"]').classList.contains('flash')"), "the approval's message").await;

    // Cost: per call and per goal, as the API counts them.
    show_tab(&page, "costs").await;
    let calls: Vec<(u64, u64, u64)> = page
        .eval("[...document.querySelectorAll('#cost-calls tbody tr')].map(r => [Number(r.dataset.seq), Number(r.cells[2].textContent), Number(r.cells[3].textContent)])")
        .await;
    let expected: Vec<(u64, u64, u64)> = answers
        .iter()
        .map(|m| {
            (
                m["sequence"].as_u64().unwrap(),
                m["usage"]["prompt_tokens"].as_u64().unwrap(),
                m["usage"]["completion_tokens"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(calls, expected);
    let requests: u64 = page
        .eval("Number(document.querySelector('#cost-calls tfoot tr').cells[8].textContent)")
        .await;
    assert_eq!(requests, detail["trace"]["totals"]["requests"].as_u64().unwrap());
    for goal in detail["goal_tree"]["goals"].as_array().unwrap() {
        let gid = goal["id"].as_str().unwrap();
        let tokens = |stats: &Value| {
            stats["usage"]["prompt_tokens"].as_u64().unwrap_or(0)
                + stats["usage"]["completion_tokens"].as_u64().unwrap_or(0)
        };
        let shown: (u64, u64, u64) = page
            .eval(&format!(
                "(r => [Number(r.querySelector('.own-tokens').textContent), Number(r.querySelector('.all-tokens').textContent), Number(r.querySelector('.all-requests').textContent)])(document.querySelector('#cost-goals tr[data-goal-id=\"{gid}\"]'))"
            ))
            .await;
        assert_eq!(
            shown,
            (
                tokens(&goal["self_stats"]),
                tokens(&goal["cumulative_stats"]),
                goal["cumulative_stats"]["requests"].as_u64().unwrap_or(0)
            ),
            "goal {gid}"
        );
    }
    page.screenshot("view-costs").await;

    // Branches: the tree with its branch point, the main path marked.
    show_tab(&page, "graph").await;
    let nodes: Vec<(u64, String, u64)> = page
        .eval("[...document.querySelectorAll('#graph-svg g.node')].map(n => [Number(n.dataset.seq), n.dataset.main, Number(n.dataset.children)])")
        .await;
    let first_answer = answers.iter().map(|m| m["sequence"].as_u64().unwrap()).min().unwrap();
    let old_end = answers
        .iter()
        .filter(|m| m["parent_sequence"] != json!(start_over))
        .map(|m| m["sequence"].as_u64().unwrap())
        .max()
        .unwrap();
    let mut expected = vec![
        (1, "true".to_owned(), 2),
        (first_answer, "false".to_owned(), 1),
        (old_end, "false".to_owned(), 0),
        (start_over, "true".to_owned(), 1),
        (head, "true".to_owned(), 0),
    ];
    let mut nodes_sorted = nodes.clone();
    nodes_sorted.sort();
    expected.sort();
    assert_eq!(nodes_sorted, expected, "{nodes:?}");
    page.screenshot("view-graph").await;
    // Picking the old branch reads it as the column.
    page.click(&format!("#graph-svg g.node[data-seq='{old_end}']")).await;
    page.wait_for("document.getElementById('messages').dataset.view === 'branch' && !document.getElementById('tab-messages').hidden", "the old branch as the column").await;
    let column: Vec<u64> = page
        .eval("[...document.querySelectorAll('#messages article')].map(a => Number(a.dataset.seq))")
        .await;
    assert!(
        column.contains(&old_end)
            && column.contains(&first_answer)
            && !column.contains(&start_over),
        "{column:?}"
    );
    page.screenshot("view-picked-branch").await;
    page.click("#picked-note button").await;
    page.wait_for(
        "document.getElementById('messages').dataset.view === 'tree'",
        "every branch again",
    )
    .await;

    // The image, large on click.
    page.click("#messages .image-button").await;
    page.wait_for("document.getElementById('image-dialog').open && document.getElementById('image-large').src.startsWith('blob:')", "the large image").await;
    let size: (u64, u64) = page.eval("(i => i.decode().then(() => [i.naturalWidth, i.naturalHeight]))(document.getElementById('image-large'))").await;
    assert!(size.0 > 0 && size.1 > 0, "{size:?}");
    page.screenshot("view-image").await;
    page.click("#image-close").await;

    // Approvals: every decision, who answered and how long the call waited.
    show_tab(&page, "decisions").await;
    let rows: Vec<(String, String, String, String)> = page
        .eval("[...document.querySelectorAll('#decision-log tbody tr')].map(r => [r.dataset.tool, r.dataset.decision, r.querySelector('.by').textContent, r.querySelector('.waited').textContent])")
        .await;
    assert_eq!(rows.len(), decisions.len(), "{rows:?}");
    let echo_row = rows.iter().find(|r| r.0 == "echo").unwrap();
    assert_eq!((echo_row.1.as_str(), echo_row.2.as_str()), ("ask-once", "the API"));
    assert_ne!(echo_row.3, "—", "the wait is shown");
    assert!(
        rows.iter().filter(|r| r.0 != "echo").all(|r| r.1 == "allow" && r.2.starts_with("rule ")),
        "{rows:?}"
    );
    page.screenshot("view-decisions").await;

    // Regenerate the head's answer: a new branch beside it.
    show_tab(&page, "messages").await;
    let since = served.last_event(&id).await;
    confirmed(&page, &format!("#messages [data-regenerate='{head}']"), "0").await;
    assert_eq!(served.finished(&id, since).await, "completed");
    served.idle(&id).await;
    let messages = served.messages(&id).await;
    let again = super::sequence_of(&messages, "assistant", "starting over, again");
    assert_eq!(
        messages.iter().find(|m| m["sequence"] == again).unwrap()["parent_sequence"],
        start_over
    );

    // Continue, then stop the slow answer: both asked first. The page has
    // seen the regenerated answer, and its run end, before it offers them.
    page.wait_for(
        &format!(
            "document.querySelector(\"#messages [data-regenerate='{again}']\") \
             && !document.getElementById('continue-form').hidden"
        ),
        "the regenerated answer and the continue box",
    )
    .await;
    let since = served.last_event(&id).await;
    page.eval::<bool>("(document.getElementById('continue-input').value = 'one more thing', true)")
        .await;
    confirmed(&page, "#continue-button", "0").await;
    page.wait_for(
        "!document.getElementById('stop-button').hidden",
        "the stop button of the running trace",
    )
    .await;
    confirmed(&page, "#stop-button", "0").await;
    assert_eq!(served.finished(&id, since).await, "stopped");
    served.idle(&id).await;
    let messages = served.messages(&id).await;
    let more = super::sequence_of(&messages, "user", "one more thing");
    assert_eq!(messages.iter().find(|m| m["sequence"] == more).unwrap()["parent_sequence"], again);
    page.wait_for(
        "document.getElementById('trace-view').dataset.status === 'stopped'",
        "the stopped trace",
    )
    .await;
    page.screenshot("view-actions").await;

    assert_no_problems(&page);
    browser.close().await;
    served.stop().await;
}

/// The list: filters by model and cost, sorts by cost, and folds a
/// trace's sub-agents under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_list_filters_sorts_and_folds_sub_traces() {
    use reson::trace::{Durability, FileTraceStore, Trace, TraceMode, TraceStore};
    let served = Served::start(json!([{ "text": "unused" }])).await;
    let store =
        FileTraceStore::open(served.dir.path().join("traces"), Durability::Batched).unwrap();
    // Made in the other order than their costs, so that a list in its
    // first order (newest first) is not already sorted by cost.
    let make = |task: &str, model: &str, cost: f64, parent: Option<&str>, age_ms: u64| {
        let mut t = Trace::new(TraceMode::Task, task, "default");
        t.model = Some(model.into());
        t.totals.cost = cost;
        t.parent_trace_id = parent.map(str::to_owned);
        t.created_at_ms -= age_ms;
        t.updated_at_ms = t.created_at_ms;
        t
    };
    let cheap = make("cheap work", "small-model", 0.01, None, 1_000);
    let dear = make("dear work", "large-model", 2.5, None, 3_000);
    let child = make("a helper", "small-model", 0.2, Some(&dear.id), 2_000);
    for t in [&cheap, &dear, &child] {
        store.create_trace(t).await.unwrap();
    }
    let report = json!({ "at_ms": 1, "summary": "identical (2 calls, 0 skipped)", "report": { "replayed": 2 } });
    store.put_record(&dear.id, reson::replay::REPORT_KIND, "0000000000001", &report).await.unwrap();
    let browser = Chromium::launch().await;
    let page = browser.page().await;
    page.open(&format!("{}/", served.base)).await;
    let ids = "[...document.querySelectorAll('#traces tbody tr')].map(r => r.dataset.traceId)";
    page.wait_for(
        &format!("JSON.stringify({ids}) === '{}'", json!([cheap.id, dear.id])),
        "the two root traces, the newest first",
    )
    .await;
    let set = |id: &str, value: &str| {
        format!(
            "(s => {{ s.value = '{value}'; s.dispatchEvent(new Event('change')); return true; }})(document.getElementById('{id}'))"
        )
    };
    page.eval::<bool>(&set("sort-by", "cost")).await;
    page.wait_for(
        &format!("JSON.stringify({ids}) === '{}'", json!([dear.id, cheap.id])),
        "dearest first",
    )
    .await;
    // The sub-agent folds under its parent.
    page.click(&format!("button[data-fold='{}']", dear.id)).await;
    page.wait_for(
        &format!("JSON.stringify({ids}) === '{}'", json!([dear.id, child.id, cheap.id])),
        "the sub-trace under its parent",
    )
    .await;
    page.screenshot("list-folded").await;
    page.eval::<bool>(&set("model-filter", "small")).await;
    page.wait_for(
        &format!("JSON.stringify({ids}) === '{}'", json!([cheap.id])),
        "the small model's root trace",
    )
    .await;
    // Two filters changed at once: the second arrives while the list loads
    // for the first, and is shown without the periodic refresh (stopped
    // here, so only the changes load the list).
    page.eval::<bool>(
        "(() => { const last = setInterval(() => {}, 1e9); \
         for (let i = 1; i <= last; i++) clearInterval(i); return true; })()",
    )
    .await;
    page.eval::<bool>(&format!("{} && {}", set("model-filter", ""), set("cost-filter", "1"))).await;
    // The folded sub-trace stays under its parent, whatever it cost.
    page.wait_for(
        &format!("JSON.stringify({ids}) === '{}'", json!([dear.id, child.id])),
        "traces of $1 or more",
    )
    .await;
    let count: usize =
        page.eval("document.querySelectorAll('#traces tbody tr[data-depth=\"0\"]').length").await;
    assert_eq!(count, 1);
    // A kept replay report shows with the trace's files.
    page.click(&format!("#traces tr[data-trace-id='{}'] td a", dear.id)).await;
    page.wait_for("document.getElementById('trace-view').dataset.loaded === 'true'", "the trace")
        .await;
    show_tab(&page, "files").await;
    let replays: Vec<String> = page
        .eval("[...document.querySelectorAll('#replays li.replay pre')].map(p => p.textContent)")
        .await;
    assert_eq!(replays, ["identical (2 calls, 0 skipped)"]);
    assert_no_problems(&page);
    browser.close().await;
    served.stop().await;
}

/// How long a trace of 10,000 messages takes to open in the browser, each
/// view drawn: printed, not asserted (a figure, not a budget).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_of_ten_thousand_messages_opens_and_its_time_is_printed() {
    use reson::trace::{Durability, FileTraceStore, Message, Role, Trace, TraceMode, TraceStore};
    const MESSAGES: usize = 10_000;
    let served = Served::start(json!([{ "text": "unused" }])).await;
    let store =
        FileTraceStore::open(served.dir.path().join("traces"), Durability::Batched).unwrap();
    let mut trace = Trace::new(TraceMode::Agent, "a long conversation", "default");
    store.create_trace(&trace).await.unwrap();
    for i in 0..MESSAGES {
        let role = if i % 2 == 0 { Role::User } else { Role::Assistant };
        let mut m = Message::new(role, format!("message {i}: some words of a long conversation"));
        if role == Role::Assistant {
            m.usage.prompt_tokens = 100;
            m.usage.completion_tokens = 20;
            m.duration_ms = 5;
        }
        store.add_message(&mut trace, m, None).await.unwrap();
    }
    store.sync().await.unwrap();
    let browser = Chromium::launch().await;
    let page = browser.page().await;
    page.open(&format!("{}/", served.base)).await;
    page.wait_for("document.querySelector('#traces tbody tr')", "the list").await;
    page.eval::<bool>(&format!(
        "(window.opened = performance.now(), location.hash = '#/traces/{}', true)",
        trace.id
    ))
    .await;
    page.wait_for(
        &format!("document.querySelectorAll('#messages article').length === {MESSAGES}"),
        "every message",
    )
    .await;
    let open_ms: f64 = page
        .eval("new Promise(r => requestAnimationFrame(() => r(performance.now() - window.opened)))")
        .await;
    let mut figures = vec![format!("messages {open_ms:.0} ms")];
    for tab in ["timeline", "costs", "graph"] {
        page.eval::<bool>("(window.opened = performance.now(), true)").await;
        show_tab(&page, tab).await;
        let ms: f64 = page.eval("new Promise(r => requestAnimationFrame(() => r(performance.now() - window.opened)))").await;
        figures.push(format!("{tab} {ms:.0} ms"));
    }
    println!("viewer: a trace of {MESSAGES} messages opens in {}", figures.join(", "));
    let bars: usize = page
        .eval("document.querySelectorAll('#tab-timeline .tl-row[data-kind=\"model\"]').length")
        .await;
    assert_eq!(bars, MESSAGES / 2, "a bar per model call");
    page.screenshot("ten-thousand").await;
    assert_no_problems(&page);
    browser.close().await;
    served.stop().await;
}

/// A question the model asks (`ask_human`) shows at the top of the page;
/// a click on a choice, or a typed answer, answers it and the run goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_from_the_model_is_answered_in_the_page() {
    let ask = json!({ "tool_calls": [{ "name": "ask_human", "arguments": {
        "question": "Which colour <b>for</b> the logo?", "choices": ["red", "blue"] } }] });
    let served = Served::start(json!([ask, { "text": "done" }])).await;
    let browser = Chromium::launch().await;
    let page = browser.page().await;
    page.open(&format!("{}/", served.base)).await;
    for (how, answer) in [("choice", "blue"), ("typed", "green, really")] {
        let id = served
            .start_run(
                json!({ "messages": [{ "role": "user", "content": format!("a logo, {how}") }] }),
            )
            .await;
        let item = format!("#questions li[data-trace-id='{id}']");
        page.wait_for(&format!("document.querySelector(\"{item}\")"), "the question").await;
        let text: String = page
            .eval(&format!("document.querySelector(\"{item} .question-text\").textContent"))
            .await;
        assert_eq!(text, "Which colour <b>for</b> the logo?", "shown as text");
        if how == "choice" {
            page.screenshot("question").await;
            page.click(&format!("{item} button[data-choice='2']")).await;
        } else {
            let textarea = page.page.find_element(&format!("{item} textarea")).await.unwrap();
            textarea.click().await.unwrap();
            textarea.type_str(answer).await.unwrap();
            page.wait_for(
                &format!("document.querySelector(\"{item} textarea\").value === '{answer}'"),
                "the typed answer in its box",
            )
            .await;
            page.click(&format!("{item} .send-answer")).await;
        }
        assert_eq!(served.finished(&id, 0).await, "completed");
        let messages = served.messages(&id).await;
        let result = messages.iter().find(|m| m["role"] == "tool").unwrap();
        assert_eq!(result["content"][0]["text"], format!("Answer from the API:\n{answer}"));
        page.wait_for(&format!("!document.querySelector(\"{item}\")"), "the question gone").await;
    }
    assert_no_problems(&page);
    browser.close().await;
    served.stop().await;
}
