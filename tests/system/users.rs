//! Users (issue 24): two users and an admin over the real `reson serve`
//! binary and the real bundled plugins. Each user tries every route on the
//! other's trace, approval and experience and gets exactly the 404 of a
//! missing one; lists, the watch socket and its `?since=` resume included;
//! the admin sees both. Tokens are added and revoked in the token file
//! while the server runs, and only their hashes are on disk. A sub-agent's
//! trace is its caller's user's. Experiences are scoped to the user, the
//! agent type or everyone, on files and on a real PostgreSQL, and an
//! `experiences.md` written before the scopes existed reads as before.

use crate::support;
use crate::support::api as api_support;
use crate::support::postgres as pg;

use api_support::{Api, End, ServerProcess, echo_turn, refused, reson, text_turn};
use reqwest::Method;
use reson::api::users::hash_token;
use reson::experience::{
    Experience, ExperienceStore, FileExperienceStore, PgExperienceStore, Rating, Source, Tags,
};
use reson::scope::{Scope, Visible};
use reson::trace::{Trace, TraceFilter, TraceMode, TraceStore};
use serde_json::{Value, json};
use std::path::Path;
use support::TestDir;

const ROOT_TOKEN: &str = "root-admin-token-5b1e0c9d";
const MISSING_TRACE: &str = "tr_000000000000";
const MISSING_APPROVAL: &str = "ap_00000000000000000000000000000000";
const MISSING_EXPERIENCE: &str = "exp_000000000000";
const MISSING_KNOWLEDGE: &str = "kn_0000000000000000";

/// `reson users add UID` on the directory's token file: the token printed.
async fn add_user(dir: &Path, uid: &str) -> String {
    let out = reson(dir).args(["users", "add", uid]).output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("token (shown once, keep it secret): "))
        .unwrap_or_else(|| panic!("no token printed: {stdout}"))
        .to_owned()
}

async fn revoke(dir: &Path, who: &str) {
    let out = reson(dir).args(["users", "revoke", who]).output().await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The script every run of the server plays, by its first user message;
/// the `tagger` model tags every task `build`, so that the experiences
/// tagged `build` are put in each new run's first message.
fn script() -> Value {
    json!({
        "turns": [text_turn("ok"), text_turn("ok again")],
        "agents": [
            { "match": "ask me", "turns": [echo_turn("a"), text_turn("done")] },
            { "match": "show me", "turns": [
                { "tool_calls": [{ "name": "picture", "arguments": { "caption": "red", "images": ["red"] } }] },
                text_turn("shown"),
            ] },
            { "match": "delegate please", "turns": [
                { "tool_calls": [{ "name": "agent", "arguments": { "task": "child work" } }] },
                text_turn("delegated"),
            ] },
            { "match": "child work", "turns": [text_turn("child done")] },
            { "match": "look up lessons", "turns": [
                { "tool_calls": [{ "name": "get_experience", "arguments": { "intent": ["build"] } }] },
                text_turn("looked"),
            ] },
        ],
        "models": {
            "tagger": { "turns": [{ "text": "{\"intent\": [\"build\"], \"state\": []}" }] },
            "reflector": { "turns": [{ "text": json!({ "experiences": [{
                "category": "logic_flow", "rule": "Delegate the child work.",
                "condition": "work a child can do", "evidence": [1],
            }] }).to_string() }] },
        },
    })
}

/// A directory with the scripted provider and echo, a token file, and
/// `root` as an admin in `[server.users]`; `store` is its `[store]` table
/// (empty: files).
fn setup() -> TestDir {
    setup_on("")
}

fn setup_on(store: &str) -> TestDir {
    let dir = api_support::dir_with(&["scripted", "echo"]);
    dir.install(support::test_plugins(), "picture");
    let path = dir.path().join("script.json");
    std::fs::write(&path, script().to_string()).unwrap();
    dir.config(&format!(
        r#"
[permissions]
rules = [
  {{ decision = "allow", tool = "echo" }},
  {{ decision = "allow", tool = "picture" }},
  {{ decision = "allow", tool = "agent" }},
  {{ decision = "allow", tool = "get_experience" }},
]

[presets.careful]
rules = [{{ decision = "ask", tool = "echo" }}]

[experiences]
utility_model = "tagger"

[plugins.scripted]
dirs = [{{ path = ".", access = "read" }}]
config = {{ script = "{}" }}

[server]
token_file = "tokens.toml"
approval_timeout_ms = 60000

[server.users.root]
token_sha256 = "{}"
role = "admin"

{store}
"#,
        path.display(),
        hash_token(ROOT_TOKEN)
    ));
    dir
}

/// POST /api/experiences: the stored experience.
async fn learn(api: &Api, body: Value) -> Value {
    api.post("/api/experiences", body).await.expect(201)
}

fn trace_ids(list: &Value) -> Vec<String> {
    list["traces"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap().into()).collect()
}

fn rules(list: &Value) -> Vec<String> {
    let all = list["experiences"].as_array().unwrap();
    all.iter().map(|e| e["rule"].as_str().unwrap().to_owned()).collect()
}

/// Every route of the OpenAPI document that names one thing (a trace, an
/// approval, an experience, a knowledge entry, an image of a trace), with
/// `ids` put in: method, path, the id. Every parameter of every path is
/// filled: a route with one this does not know fails the test.
async fn routes_with_ids(api: &Api, ids: [&str; 5]) -> Vec<(Method, String, String)> {
    let [trace, approval, experience, knowledge, image] = ids;
    let doc = api.get("/api/openapi.json").await.expect(200);
    let mut routes = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        if !path.contains('{') {
            continue;
        }
        let id = if path.starts_with("/api/approvals/") {
            approval
        } else if path.starts_with("/api/experiences/") {
            experience
        } else if path.starts_with("/api/knowledge/") {
            knowledge
        } else {
            trace
        };
        let path = path.replace("{id}", id).replace("{name}", image);
        assert!(!path.contains('{'), "a path parameter to fill: {path}");
        for method in item.as_object().unwrap().keys() {
            let method = match method.as_str() {
                "get" => Method::GET,
                "post" => Method::POST,
                "delete" => Method::DELETE,
                other => panic!("a route with method {other}: cover it here"),
            };
            routes.push((method, path.clone(), id.to_owned()));
        }
    }
    routes.sort_by(|a, b| (&a.1, a.0.as_str()).cmp(&(&b.1, b.0.as_str())));
    routes
}

/// A body the route takes, so that only whose the thing is decides.
fn body_for(method: &Method, path: &str) -> Option<Vec<u8>> {
    match (method, path) {
        (&Method::POST, p) if p.starts_with("/api/approvals/") => {
            Some(br#"{"answer": "once"}"#.to_vec())
        }
        (&Method::POST, p) if p.starts_with("/api/questions/") => {
            Some(br#"{"answer": "yes"}"#.to_vec())
        }
        (&Method::POST, _) => Some(b"{}".to_vec()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_user_sees_only_their_own_and_the_admin_sees_all_on_files() {
    let dir = setup();
    two_users(&dir).await;
    assert!(dir.path().join(".reson/experiences.md").is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_user_sees_only_their_own_and_the_admin_sees_all_on_postgres() {
    let url = pg::cluster().fresh_database().await;
    let dir = setup_on(&format!("[store]\nkind = \"postgres\"\nurl = \"{url}\"\n"));
    two_users(&dir).await;
    let traces = dir.path().join("traces");
    assert!(!traces.exists() || std::fs::read_dir(traces).unwrap().next().is_none());
    assert!(!dir.path().join(".reson/experiences.md").exists(), "all in the database");
}

async fn two_users(dir: &TestDir) {
    let alice_token = add_user(dir.path(), "alice").await;
    let bob_token = add_user(dir.path(), "bob").await;
    let server = ServerProcess::start(dir.path(), &[]).await;
    let alice = server.api.with_token(Some(&alice_token));
    let bob = server.api.with_token(Some(&bob_token));
    let root = server.api.with_token(Some(ROOT_TOKEN));
    server.api.get("/api/traces").await.expect_error(401, "unauthorized");

    // Experiences: each user's goes to their own scope; a user may not
    // write another scope, an admin may.
    let tags = json!({ "intent": ["build"], "state": [] });
    let alices = learn(&alice, json!({ "rule": "Alice builds with make.", "tags": tags })).await;
    assert_eq!((&alices["scope"], &alices["source"]), (&json!("user:alice"), &json!("manual")));
    learn(&bob, json!({ "rule": "Bob builds with bazel.", "tags": tags })).await;
    let global = json!({ "rule": "Everyone builds in CI.", "tags": tags, "scope": "global" });
    bob.post("/api/experiences", global.clone()).await.expect_error(400, "bad_request");
    let as_alice = json!({ "rule": "Sneaky.", "scope": "user:alice" });
    bob.post("/api/experiences", as_alice).await.expect_error(400, "bad_request");
    let bad = json!({ "rule": "Sure.", "confidence": 1.5 });
    alice.post("/api/experiences", bad).await.expect_error(422, "unprocessable");
    assert_eq!(learn(&root, global).await["scope"], "global");

    // Bob's run sees his and the global experiences, in its first message
    // and through get_experience; never Alice's. Each use is counted.
    let looked = bob.start("look up lessons", json!({})).await;
    bob.finish(&looked, 0).await;
    let messages = bob.messages(&looked, "main_path").await.to_string();
    assert!(messages.contains("## Relevant experience"), "{messages}");
    assert_eq!(messages.matches("Bob builds with bazel.").count(), 2, "{messages}");
    assert_eq!(messages.matches("Everyone builds in CI.").count(), 2, "{messages}");
    assert!(!messages.contains("Alice builds"), "{messages}");
    let listed = bob.get("/api/experiences").await.expect(200);
    assert_eq!(rules(&listed), ["Bob builds with bazel.", "Everyone builds in CI."]);
    let uses: Vec<&Value> =
        listed["experiences"].as_array().unwrap().iter().map(|e| &e["usage_count"]).collect();
    assert_eq!(uses, [&json!(2), &json!(2)], "{listed}");

    // Alice: a run waiting on an approval, and one with a sub-agent.
    let asking = alice.start("ask me", json!({ "preset": "careful" })).await;
    let approval = alice.pending_approval(&asking).await;
    let approval_id = approval["id"].as_str().unwrap().to_owned();
    assert!(
        approval_id.len() == 35 && approval_id.starts_with("ap_"),
        "an approval id is random, not a count: {approval_id}"
    );
    // An image kept in Alice's trace, by its real name.
    let pictured = alice.start("show me the picture", json!({})).await;
    alice.finish(&pictured, 0).await;
    let pictured_messages = alice.messages(&pictured, "all").await;
    let image_name = pictured_messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|part| part["type"] == "image")
        .and_then(|part| part["name"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("no image kept: {pictured_messages}"));
    let image_path = format!("/api/traces/{pictured}/images/{image_name}");
    let png = alice.send(Method::GET, &image_path, None).await;
    assert_eq!(png.status, 200, "{}", png.text);
    let delegating = alice.start("delegate please", json!({})).await;
    alice.finish(&delegating, 0).await;
    let detail = alice.trace(&delegating).await;
    assert_eq!(detail["trace"]["uid"], "alice");
    let Some(child) = detail["sub_traces"][0]["id"].as_str().map(str::to_owned) else {
        panic!("no sub-agent ran: {}", alice.messages(&delegating, "all").await)
    };
    assert_eq!(alice.trace(&child).await["trace"]["uid"], "alice", "the sub-agent inherits");
    let first = alice.messages(&delegating, "main_path").await.to_string();
    assert!(first.contains("Alice builds with make.") && !first.contains("Bob builds"), "{first}");
    // What Alice's trace teaches is hers, with the message it cites.
    let reflect = format!("/api/traces/{delegating}/reflect");
    let learnt = alice.post(&reflect, json!({ "model": "reflector" })).await.expect(200);
    let learnt = &learnt["experiences"][0];
    assert_eq!((&learnt["scope"], &learnt["source"]), (&json!("user:alice"), &json!("execution")));
    assert_eq!(learnt["evidence"], json!([format!("{delegating}-0001")]));
    assert_eq!(learnt["condition"], "work a child can do");
    let learnt_rule = "Delegate the child work.";
    assert!(!rules(&bob.get("/api/experiences").await.expect(200)).contains(&learnt_rule.into()));

    // Knowledge: each user's notes go to their own scope; a user may not
    // write another scope, nor replace another's entry (the 404 of a
    // missing one), an admin may.
    let note =
        |title: &str| json!({ "title": title, "content": format!("{title}: the deploy notes") });
    let alices_note = alice.post("/api/knowledge", note("Alice deploys")).await.expect(201);
    assert_eq!(alices_note["scope"], "user:alice");
    let alices_note_id = alices_note["id"].as_str().unwrap().to_owned();
    assert_eq!(
        bob.post("/api/knowledge", note("Bob deploys")).await.expect(201)["scope"],
        "user:bob"
    );
    let mut shared = note("Everyone deploys");
    shared["scope"] = json!("global");
    bob.post("/api/knowledge", shared.clone()).await.expect_error(422, "unprocessable");
    assert_eq!(root.post("/api/knowledge", shared).await.expect(201)["scope"], "global");
    let mut coders = note("Coders deploy");
    coders["scope"] = json!("agent:coder");
    root.post("/api/knowledge", coders).await.expect(201);
    // Ids a client chooses are per user: Alice's id is simply free for
    // Bob, exactly as an id nobody holds is, and his save leaves hers be.
    let mut chosen = note("Alice plans");
    chosen["id"] = json!("plans");
    assert_eq!(alice.post("/api/knowledge", chosen).await.expect(201)["id"], "plans");
    let save_as = |id: &str| {
        let mut body = note("Bob's now");
        body["id"] = json!(id);
        body
    };
    for id in [alices_note_id.as_str(), "plans"] {
        let taken = bob.post("/api/knowledge", save_as(id)).await;
        let free = bob.post("/api/knowledge", save_as("nobody-holds-this")).await;
        assert_eq!((taken.status, free.status), (201, 201), "{}", taken.text);
        let shape = |text: &str, id: &str| {
            let mut entry: Value = serde_json::from_str(text).unwrap();
            for field in ["created_at", "updated_at"] {
                entry[field] = json!("T");
            }
            entry.to_string().replace(id, "ID")
        };
        assert_eq!(shape(&taken.text, id), shape(&free.text, "nobody-holds-this"));
        let entry: Value = serde_json::from_str(&taken.text).unwrap();
        assert_eq!((&entry["id"], &entry["scope"]), (&json!(id), &json!("user:bob")));
    }
    let hers = alice.get("/api/knowledge?q=alice").await.expect(200);
    let hers: Vec<&Value> =
        hers["entries"].as_array().unwrap().iter().map(|e| &e["title"]).collect();
    assert_eq!(hers.len(), 2, "Bob's saves changed none of Alice's: {hers:?}");
    assert!(hers.iter().all(|t| t.as_str().unwrap().starts_with("Alice")), "{hers:?}");
    // Bob's own, under the ids Alice holds too, are his to remove; hers stay.
    for id in ["plans", alices_note_id.as_str(), "nobody-holds-this"] {
        bob.send(Method::DELETE, &format!("/api/knowledge/{id}"), None).await.expect(200);
    }
    let none = bob.send(Method::DELETE, &format!("/api/knowledge/{MISSING_KNOWLEDGE}"), None).await;
    let other = bob.send(Method::DELETE, "/api/knowledge/plans", None).await;
    assert_eq!((other.status, none.status), (404, 404), "{}", other.text);
    assert_eq!(other.text.replace("plans", "ID"), none.text.replace(MISSING_KNOWLEDGE, "ID"));
    let titles = |list: &Value| -> Vec<String> {
        let mut all: Vec<String> = list["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["title"].as_str().unwrap().to_owned())
            .collect();
        all.sort();
        all
    };
    let bobs = ["Bob deploys", "Coders deploy", "Everyone deploys"];
    assert_eq!(titles(&bob.get("/api/knowledge").await.expect(200)), bobs);
    assert_eq!(titles(&bob.get("/api/knowledge?q=deploy").await.expect(200)), bobs);
    let alice_sees = ["Alice deploys", "Alice plans", "Coders deploy", "Everyone deploys"];
    assert_eq!(titles(&alice.get("/api/knowledge?q=deploy+notes").await.expect(200)), alice_sees);
    assert_eq!(titles(&root.get("/api/knowledge?q=deploy").await.expect(200)).len(), 5);
    assert_eq!(titles(&root.get("/api/knowledge").await.expect(200)).len(), 5);

    // Bob on every route of Alice's trace, approval, experience and
    // knowledge entry: the 404 of a missing one, word for word but the id.
    let alice_ids = [
        asking.as_str(),
        approval_id.as_str(),
        alices["id"].as_str().unwrap(),
        alices_note_id.as_str(),
        image_name.as_str(),
    ];
    let mut theirs = routes_with_ids(&bob, alice_ids).await;
    // The image route, on the trace that has the image.
    for (_, path, id) in &mut theirs {
        if path.contains("/images/") {
            *path = image_path.clone();
            *id = pictured.clone();
        }
    }
    let missing = routes_with_ids(
        &bob,
        [MISSING_TRACE, MISSING_APPROVAL, MISSING_EXPERIENCE, MISSING_KNOWLEDGE, &image_name],
    )
    .await;
    assert!(theirs.iter().any(|(_, path, _)| path.contains("/images/")), "{theirs:?}");
    assert!(
        theirs.iter().any(|(_, path, _)| path.starts_with("/api/knowledge/")),
        "a knowledge route: {theirs:?}"
    );
    assert!(theirs.len() >= 8, "too few routes: {theirs:?}");
    for ((method, path, id), (_, missing_path, missing_id)) in theirs.iter().zip(&missing) {
        let other = bob.send(method.clone(), path, body_for(method, path)).await;
        let none = bob.send(method.clone(), missing_path, body_for(method, path)).await;
        assert_eq!((other.status, none.status), (404, 404), "{method} {path}: {}", other.text);
        assert_eq!(
            other.text.replace(id.as_str(), "ID"),
            none.text.replace(missing_id.as_str(), "ID"),
            "{method} {path}"
        );
        let child_path = path.replace(&asking, &child);
        if child_path != *path {
            let sub = bob.send(method.clone(), &child_path, body_for(method, path)).await;
            assert_eq!(sub.status, 404, "{method} {child_path}: the sub-agent's trace too");
        }
    }
    // The watch socket, from the start and resumed: refused as for a
    // missing trace.
    for since in [0, 3] {
        let watch = |id: &str| format!("/api/traces/{id}/watch?since={since}&token={bob_token}");
        let (status, other) = refused(bob.connect(&watch(&asking), None).await);
        let (_, none) = refused(bob.connect(&watch(MISSING_TRACE), None).await);
        assert_eq!(status, 404);
        assert_eq!(
            other.to_string().replace(&asking, "ID"),
            none.to_string().replace(MISSING_TRACE, "ID")
        );
    }
    // Lists hold only Bob's.
    let listed = bob.get("/api/traces").await.expect(200);
    assert_eq!(trace_ids(&listed), [looked.as_str()]);
    assert_eq!(listed["total"], 1);
    assert_eq!(bob.get("/api/traces/running").await.expect(200), json!({ "traces": [] }));
    assert_eq!(bob.get("/api/health").await.expect(200)["running"], 0);
    assert_eq!(alice.get("/api/health").await.expect(200)["running"], 1);
    assert_eq!(bob.get("/api/approvals").await.expect(200), json!({ "approvals": [] }));
    assert_eq!(rules(&bob.get("/api/experiences").await.expect(200)).len(), 2);
    assert_eq!(rules(&alice.get("/api/experiences").await.expect(200)).len(), 3);
    // Alice's approval is still hers to answer: Bob's tries changed nothing.
    let hers = alice.get("/api/approvals").await.expect(200);
    assert_eq!(hers["approvals"].as_array().unwrap().len(), 1, "{hers}");
    let mut watcher = alice.watch(&asking, 0).await;

    // A user cannot start a run as someone else; an admin can.
    let as_alice = json!({ "messages": [{ "role": "user", "content": "hi" }], "uid": "alice" });
    bob.post("/api/traces", as_alice).await.expect_error(400, "bad_request");
    let carols = root.start("for carol", json!({ "uid": "carol" })).await;
    root.finish(&carols, 0).await;
    assert_eq!(root.trace(&carols).await["trace"]["uid"], "carol");

    // The admin sees and drives everyone's.
    let all = trace_ids(&root.get("/api/traces").await.expect(200));
    for id in [&asking, &delegating, &child, &looked, &carols] {
        assert!(all.contains(id), "{id} not in {all:?}");
    }
    let running = trace_ids(&root.get("/api/traces/running").await.expect(200));
    assert_eq!(running, [asking.as_str()]);
    assert_eq!(rules(&root.get("/api/experiences").await.expect(200)).len(), 4);
    // Alice's note is still hers; the admin may remove anyone's.
    let hers = alice.get("/api/knowledge?q=alice").await.expect(200);
    assert_eq!(titles(&hers), ["Alice deploys", "Alice plans"]);
    let note_path = format!("/api/knowledge/{alices_note_id}");
    root.send(Method::DELETE, &note_path, None).await.expect(200);
    alice.send(Method::DELETE, &note_path, None).await.expect_error(404, "not_found");
    let pending = root.get("/api/approvals").await.expect(200);
    assert_eq!(pending["approvals"][0]["id"], approval["id"]);
    let answer = format!("/api/approvals/{approval_id}");
    root.post(&answer, json!({ "answer": "once" })).await.expect(200);
    watcher.until_kind("trace_finished").await;
    alice.settled(&asking).await;

    // Alice removes her experience; Bob's tries above left it in place.
    let path = format!("/api/experiences/{}", alices["id"].as_str().unwrap());
    alice.send(Method::DELETE, &path, None).await.expect(200);
    alice.send(Method::DELETE, &path, None).await.expect_error(404, "not_found");
    assert_eq!(rules(&root.get("/api/experiences").await.expect(200)).len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_added_and_revoked_without_a_restart_and_stored_hashed() {
    let dir = setup();
    let bob_token = add_user(dir.path(), "bob").await;
    let server = ServerProcess::start(dir.path(), &[]).await;
    let bob = server.api.with_token(Some(&bob_token));
    bob.get("/api/traces").await.expect(200);

    let dave_token = add_user(dir.path(), "dave").await;
    let dave = server.api.with_token(Some(&dave_token));
    assert_eq!(dave.get("/api/traces").await.expect(200)["total"], 0);
    // Bob watches a run of his that waits for an approval.
    let asking = bob.start("ask me", json!({ "preset": "careful" })).await;
    let approval = bob.pending_approval(&asking).await;
    let mut watching = bob.watch(&asking, 0).await;
    watching.until_kind("trace_started").await;
    revoke(dir.path(), "bob").await;
    bob.get("/api/traces").await.expect_error(401, "unauthorized");
    // His open socket ends too, with the documented code; his run goes on.
    match watching.end().await {
        End::Closed(Some(frame)) => {
            assert_eq!(u16::from(frame.code), 4401, "{frame:?}");
            assert!(frame.reason.contains("revoked"), "{frame:?}");
        }
        other => panic!("the socket of a revoked token ended with {other:?}"),
    }
    let root = server.api.with_token(Some(ROOT_TOKEN));
    assert_eq!(
        root.trace(&asking).await["running"],
        true,
        "the run is the user's, not the token's"
    );
    let answer = format!("/api/approvals/{}", approval["id"].as_str().unwrap());
    root.post(&answer, json!({ "answer": "once" })).await.expect(200);
    root.finish(&asking, 0).await;
    dave.get("/api/traces").await.expect(200);
    // The socket's query token is checked against the same file.
    let watch = format!("/api/traces/{MISSING_TRACE}/watch?token={bob_token}");
    assert_eq!(refused(bob.connect(&watch, None).await).0, 401);

    let file = std::fs::read_to_string(dir.path().join("tokens.toml")).unwrap();
    for token in [&bob_token, &dave_token] {
        assert!(!file.contains(token.as_str()), "a token in plain text: {file}");
    }
    assert!(file.contains(&hash_token(&dave_token)) && !file.contains(&hash_token(&bob_token)));
    let listed = reson(dir.path()).args(["users", "list"]).output().await.unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains("dave") && !listed.contains("bob"), "{listed}");

    // A broken edit locks everyone out of the file until it is fixed; the
    // config's admin still gets in.
    std::fs::write(dir.path().join("tokens.toml"), "[[token]]\nid = 1\n").unwrap();
    dave.get("/api/traces").await.expect_error(401, "unauthorized");
    server.api.with_token(Some(ROOT_TOKEN)).get("/api/traces").await.expect(200);
    let out = reson(dir.path()).args(["users", "add", "erin"]).output().await.unwrap();
    assert!(!out.status.success(), "an add to a broken file writes nothing");
    assert!(String::from_utf8_lossy(&out.stderr).contains("malformed token file"));
}

/// A new experience in `scope`, tagged `build`.
fn scoped(id: &str, scope: Scope, rule: &str) -> Experience {
    let tags = Tags { intent: vec!["build".into()], state: Vec::new() };
    let mut e = Experience::new("tr_learnt", "tool_usage", tags, rule);
    e.id = id.into();
    e.scope = scope;
    e
}

/// The same scenario on any store: runs see their user's, their agent
/// type's and global experiences; uses and ratings are counted; removal.
async fn scoping(store: &dyn ExperienceStore) {
    let mut manual = scoped("exp_global", Scope::Global, "Everyone builds in CI.");
    manual.source = Source::Manual;
    manual.condition = "a repository with CI".into();
    manual.evidence = vec!["tr_learnt-0003".into()];
    manual.confidence = 0.9;
    store
        .append(vec![
            manual.clone(),
            scoped("exp_alice", Scope::User("alice".into()), "Alice builds with make."),
            scoped("exp_bob", Scope::User("bob".into()), "Bob builds with bazel."),
            scoped("exp_coder", Scope::Agent("coder".into()), "Coders build twice."),
        ])
        .await
        .unwrap();
    let build: &[String] = &["build".to_owned()];
    let ids = |visible: Visible| async move {
        let found = store.relevant_in(&visible, build, &[], 10).await.unwrap();
        let mut ids: Vec<String> = found.into_iter().map(|e| e.id).collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(Visible::run(Some("alice"), "default")).await, ["exp_alice", "exp_global"]);
    assert_eq!(
        ids(Visible::run(Some("bob"), "coder")).await,
        ["exp_bob", "exp_coder", "exp_global"]
    );
    assert_eq!(ids(Visible::run(None, "default")).await, ["exp_global"]);
    assert_eq!(ids(Visible::caller(Some("alice"), false)).await.len(), 3, "global, coder, alice");
    assert_eq!(ids(Visible::everything()).await.len(), 4);

    store.record_use(&["exp_alice".into(), "exp_gone".into()]).await.unwrap();
    store.record_use(&["exp_alice".into()]).await.unwrap();
    store.rate("exp_alice", Rating::Helpful).await.unwrap();
    let rated = store.rate("exp_alice", Rating::Harmful).await.unwrap();
    // Learnt rated helpful once, then once more, and once harmful.
    assert_eq!((rated.usage_count, rated.success_rate), (2, Some(2.0 / 3.0)));
    let all = store.list().await.unwrap();
    assert_eq!(all[0], manual, "every field kept");
    assert_eq!(store.remove("exp_bob").await.unwrap().rule, "Bob builds with bazel.");
    assert!(store.remove("exp_bob").await.is_err());
    let mut bad = scoped("exp_bad", Scope::Global, "Too sure.");
    bad.confidence = 2.0;
    assert!(store.append(vec![bad]).await.is_err());
    assert_eq!(store.list().await.unwrap().len(), 3);
}

#[tokio::test]
async fn experiences_are_scoped_on_files_and_on_postgres_alike() {
    let dir = tempfile::tempdir().unwrap();
    let file = FileExperienceStore::new(dir.path().join("experiences.md"));
    scoping(&file).await;
    let text = std::fs::read_to_string(file.path()).unwrap();
    assert!(text.contains("scope: user:alice") && text.contains("source: manual"), "{text}");
    assert!(text.contains("evidence:\n- tr_learnt-0003"), "{text}");

    let url = pg::cluster().fresh_database().await;
    let db = reson::database::Database::connect(&url).await.unwrap();
    scoping(&PgExperienceStore::new(db)).await;
}

#[tokio::test]
async fn an_experiences_md_from_before_scopes_reads_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("experiences.md");
    let old = "# Experiences\n\nLessons.\n\n---\nid: exp_old\ntrace_id: tr_1\ncategory: tool_usage\n\
               tags:\n  state: [rust]\n  intent: [build]\nmetrics:\n  helpful: 3\n  harmful: 1\n\
               created_at: 2026-01-02T03:04:05Z\nreviewer: sam\n---\nRun cargo check first.\n";
    std::fs::write(&path, old).unwrap();
    let store = FileExperienceStore::new(&path);
    let all = store.list().await.unwrap();
    let e = &all[0];
    assert_eq!((e.id.as_str(), e.rule.as_str()), ("exp_old", "Run cargo check first."));
    assert_eq!((e.metrics.helpful, e.metrics.harmful), (3, 1));
    assert_eq!(e.scope, Scope::Global);
    assert_eq!(
        (e.source, e.confidence, e.usage_count, e.success_rate),
        (Source::Execution, 0.5, 0, None)
    );
    assert!(e.condition.is_empty() && e.evidence.is_empty());
    // Seen by every run; written back with no new field, beside a new one.
    let found = store.relevant_in(&Visible::run(Some("zoe"), "x"), &["build".into()], &[], 3).await;
    assert_eq!(found.unwrap().len(), 1);
    store.append(vec![scoped("exp_new", Scope::User("zoe".into()), "New.")]).await.unwrap();
    let again = store.list().await.unwrap();
    assert_eq!(again[0], all[0]);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("reviewer: sam"), "hand-written fields kept: {text}");
    for new_field in ["scope: global", "source:", "confidence:", "usage_count:", "evidence:"] {
        assert!(!text.contains(new_field), "{new_field} written for defaults: {text}");
    }
    assert!(text.contains("scope: user:zoe"), "{text}");
    // A scope that is not one is refused with its line.
    std::fs::write(&path, "---\nid: exp_x\nscope: team:red\n---\nRule.\n").unwrap();
    let err = store.list().await.unwrap_err().to_string();
    assert!(err.contains("experiences.md:") && err.contains("team:red"), "{err}");
}

/// A trace of `uid`, created in `store`.
async fn owned(store: &dyn TraceStore, uid: Option<&str>) -> String {
    let mut trace = Trace::new(TraceMode::Agent, "task", "default");
    trace.uid = uid.map(str::to_owned);
    store.create_trace(&trace).await.unwrap();
    trace.id
}

async fn lists_by_user(store: &dyn TraceStore) {
    let a = owned(store, Some("alice")).await;
    let b = owned(store, Some("bob")).await;
    let nobody = owned(store, None).await;
    let of = |uid: Option<&str>| {
        let filter = TraceFilter { uid: uid.map(str::to_owned), ..TraceFilter::default() };
        async move {
            let mut ids: Vec<String> =
                store.list_traces(&filter).await.unwrap().into_iter().map(|t| t.id).collect();
            ids.sort();
            ids
        }
    };
    assert_eq!(of(Some("alice")).await, [a.as_str()]);
    assert_eq!(of(Some("bob")).await, [b.as_str()]);
    assert_eq!(of(None).await.len(), 3);
    assert_eq!(store.get_trace(&a).await.unwrap().unwrap().uid.as_deref(), Some("alice"));
    assert_eq!(store.get_trace(&nobody).await.unwrap().unwrap().uid, None);
}

#[tokio::test]
async fn every_trace_store_keeps_and_filters_by_the_user() {
    lists_by_user(&reson::trace::MemoryTraceStore::new()).await;
    let dir = tempfile::tempdir().unwrap();
    let files =
        reson::trace::FileTraceStore::open(dir.path(), reson::trace::Durability::Batched).unwrap();
    lists_by_user(&files).await;
    let url = pg::cluster().fresh_database().await;
    let db = reson::database::Database::connect(&url).await.unwrap();
    lists_by_user(&reson::trace::PgTraceStore::new(db)).await;

    // `traces migrate` carries each trace's user into the database's column.
    let url = pg::cluster().fresh_database().await;
    let db = reson::database::Database::connect(&url).await.unwrap();
    let pg = reson::trace::PgTraceStore::new(db);
    let done = reson::trace::copy_traces(&files, &pg).await.unwrap();
    assert_eq!(done.copied.len(), 3);
    let filter = TraceFilter { uid: Some("alice".into()), ..TraceFilter::default() };
    let alices = pg.list_traces(&filter).await.unwrap();
    assert_eq!(alices.len(), 1);
    assert_eq!(alices[0].uid.as_deref(), Some("alice"));
}

/// `reson ARGS` on the directory: success, and stdout.
async fn cli(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = reson(dir).args(args).output().await.unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_runs_and_lists_as_a_user_and_hashes_tokens() {
    let dir = setup();
    let d = dir.path();
    let script = d.join("script.json");
    let script = script.to_str().unwrap();
    let (ok, out, err) =
        cli(d, &["run", "--script", script, "--user", "alice", "--json", "hi"]).await;
    assert!(ok, "{err}");
    let started: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    let id = started["trace_id"].as_str().unwrap().to_owned();

    let listed = |user: &'static str| async move {
        let (ok, out, err) = cli(d, &["traces", "list", "--json", "--user", user]).await;
        assert!(ok, "{err}");
        let traces: Vec<Value> = serde_json::from_str(&out).unwrap();
        traces.iter().map(|t| t["id"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
    };
    assert_eq!(listed("alice").await, [id.as_str()]);
    assert!(listed("bob").await.is_empty());
    // Bob cannot continue Alice's trace: to him it does not exist.
    let (ok, _, err) =
        cli(d, &["run", "--script", script, "--user", "bob", "--trace", &id, "more"]).await;
    assert!(!ok && err.contains(&id), "{err}");
    let (ok, _, err) =
        cli(d, &["run", "--script", script, "--user", "alice", "--trace", &id, "more"]).await;
    assert!(ok, "{err}");

    // Experiences as a user's runs see them.
    let store = FileExperienceStore::new(d.join(".reson/experiences.md"));
    let zoe = scoped("exp_zoe", Scope::User("zoe".into()), "Zoe's rule.");
    let yan = scoped("exp_yan", Scope::User("yan".into()), "Yan's rule.");
    store.append(vec![zoe, yan]).await.unwrap();
    let (ok, out, err) = cli(d, &["experiences", "list", "--user", "zoe"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("Zoe's rule.") && out.contains("scope: user:zoe"), "{out}");
    assert!(!out.contains("Yan's rule."), "{out}");

    let mut hash = reson(d);
    hash.args(["users", "hash"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = hash.spawn().unwrap();
    use tokio::io::AsyncWriteExt as _;
    child.stdin.take().unwrap().write_all(b"my-token\n").await.unwrap();
    let out = child.wait_with_output().await.unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), hash_token("my-token"));
}
