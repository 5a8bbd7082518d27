//! Compaction costs: level 1 over a 10k-message history (target ≤ 5 ms)
//! and counting 100k tokens with OpenAI's `o200k_base` BPE (target
//! ≤ 20 ms).
//!
//! `cargo bench -p reson --bench compaction` prints criterion's figures
//! and, last, one summary line per figure with its target.

use criterion::{Criterion, criterion_group, criterion_main};
use reson::agent::compaction::{TokenCounter, level1};
use reson::trace::{GoalTree, Message, Role, ToolCall};
use std::hint::black_box;
use std::time::Instant;

/// A 10k-message history: the task, then 50 goals of 200 messages each
/// (assistant calls and their results), the first 40 goals done.
fn history() -> (Vec<Message>, GoalTree) {
    let mut goals = GoalTree::new();
    let root = goals.ensure_root("the task").unwrap();
    let mut messages = vec![Message::new(Role::User, "the task")];
    let mut seq = 1;
    for g in 0..50 {
        let id = goals.under(&root, &format!("part {g}")).unwrap();
        goals.focus(&id).unwrap();
        for i in 0..100 {
            seq += 1;
            let mut call = Message::new(Role::Assistant, "Reading the next file.");
            call.tool_calls = vec![ToolCall {
                id: format!("c{g}_{i}"),
                name: "read".into(),
                arguments: format!(r#"{{"path":"src/part{g}/file{i}.rs"}}"#),
            }];
            call.sequence = seq;
            call.goal_id = Some(id.clone());
            seq += 1;
            let mut result = Message::tool_result(&call.tool_calls[0], "fn main() {}\n".repeat(20));
            result.sequence = seq;
            result.goal_id = Some(id.clone());
            messages.extend([call, result]);
        }
        if g < 40 {
            goals.done(&format!("part {g} read")).unwrap();
        }
    }
    (messages, goals)
}

/// About 100k tokens of mixed prose, code and JSON.
fn text() -> String {
    let mut text = String::new();
    let mut i = 0;
    while text.len() < 280_000 {
        text.push_str(&format!(
            "fn item_{i}(x: u32) -> u32 {{ x * {i} }} // The quick brown fox jumps over the lazy dog.\n\
             {{\"path\": \"/work/src/file_{i}.rs\", \"ok\": true, \"lines\": {i}}}\n"
        ));
        i += 1;
    }
    text
}

fn median_ms(mut runs: Vec<f64>) -> f64 {
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}

fn bench(c: &mut Criterion) {
    let (messages, goals) = history();
    assert_eq!(messages.len(), 10_001);
    let out = level1(&messages, &goals);
    assert_eq!(out.goals.len(), 40);
    c.bench_function("level 1 of 10k messages", |b| {
        b.iter(|| level1(black_box(&messages), &goals))
    });

    let counter = TokenCounter::for_model("gpt-4o");
    let text = text();
    let tokens = counter.count(&text);
    assert!((95_000..=140_000).contains(&tokens), "{tokens} tokens");
    c.bench_function("count ~100k tokens (o200k_base)", |b| {
        b.iter(|| counter.count(black_box(&text)))
    });

    let level1_ms = median_ms(
        (0..20)
            .map(|_| {
                let t = Instant::now();
                black_box(level1(&messages, &goals));
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect(),
    );
    let count_ms = median_ms(
        (0..10)
            .map(|_| {
                let t = Instant::now();
                black_box(counter.count(&text));
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect(),
    );
    let per_100k = count_ms * 100_000.0 / tokens as f64;
    println!("level 1 of {} messages: {level1_ms:.2} ms (target ≤ 5 ms)", messages.len());
    println!(
        "counting 100k tokens: {per_100k:.1} ms ({tokens} tokens in {count_ms:.1} ms; target ≤ 20 ms)"
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
