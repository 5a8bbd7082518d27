//! The bundled `pdf` plugin's `read_pdf` through real runs (scripted
//! provider) on made-up files: the text by page and the images to the
//! model; hostile files (deep nesting, a decompression bomb, a broken
//! cross-reference table, a file too large, nesting the parser meets
//! inside a page) each end in a clear error within the call, and the next
//! call is served.

use crate::support;
use crate::support::pdf::{self, Image};
use flate2::Compression;
use flate2::write::ZlibEncoder;
use reson::agent::RunConfig;
use reson::trace::{ContentPart, Durability, FileTraceStore, Message, Role, TraceStore};
use serde_json::{Value, json};
use std::io::Write;
use support::TestDir;

/// Runs one `read_pdf` call per `(file, bytes, arguments)` in order, in
/// one run (each file written to the workspace first; no bytes: the file
/// as an earlier entry wrote it); each call's result message.
async fn read_each(files: &[(&str, Vec<u8>, Value)]) -> Vec<Message> {
    let dir = TestDir::new();
    dir.install(support::plugins(), "scripted").install(support::plugins(), "pdf");
    let ws = dir.path().join("workspace");
    std::fs::create_dir_all(&ws).unwrap();
    let mut turns = Vec::new();
    for (name, bytes, arguments) in files {
        if !bytes.is_empty() {
            std::fs::write(ws.join(name), bytes).unwrap();
        }
        let mut arguments = arguments.clone();
        arguments["path"] = json!(name);
        turns.push(json!({ "tool_calls": [{ "name": "read_pdf", "arguments": arguments }] }));
    }
    turns.push(json!({ "text": "read them" }));
    let extra = "[plugins.pdf]\ndirs = [{ path = \"workspace\", access = \"read\" }]\n";
    let runtime = dir.open_scripted(&json!({ "turns": turns }), extra).await;
    let store = dir.store();
    let runner = TestDir::scripted_runner(&runtime, store.clone());
    let handle = runner
        .run(vec![Message::new(Role::User, "read the files")], RunConfig::default())
        .await
        .unwrap();
    let outcome = handle.wait().await.expect("the run survives every file");
    assert_eq!(outcome.final_text.as_deref(), Some("read them"));
    let messages = store.get_messages(&outcome.trace_id).await.unwrap();
    messages.into_iter().filter(|m| m.role == Role::Tool).collect()
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut encoder = ZlibEncoder::new(Vec::new(), Compression::best());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_text_by_page_and_the_images_reach_the_model() {
    let picture = Image {
        width: 4,
        height: 2,
        rgb: (0..8).flat_map(|i| [i * 30, 255 - i * 30, 128]).collect(),
    };
    let report = pdf::document(
        &["Quarterly report (draft)", "Revenue grew by 12 percent", "Appendix: methods"],
        Some(&picture),
        None,
    );
    let results = read_each(&[
        ("report.pdf", report.clone(), json!({})),
        ("report.pdf", report, json!({ "pages": "2-3", "images": false })),
    ])
    .await;
    let all = results[0].text();
    assert!(all.starts_with("report.pdf: 3 pages") || all.contains("report.pdf: 3 pages"), "{all}");
    for (n, text) in [
        (1, "Quarterly report (draft)"),
        (2, "Revenue grew by 12 percent"),
        (3, "Appendix: methods"),
    ] {
        let page = all
            .split(&format!("--- page {n} ---\n"))
            .nth(1)
            .expect("the page")
            .lines()
            .next()
            .unwrap();
        assert_eq!(page.trim(), text, "{all}");
    }
    let images = support::image_sizes(&results[0]);
    assert_eq!(images, [(4, 2)], "the page's image, to the model: {:?}", results[0].content);
    let some = results[1].text();
    assert!(!some.contains("--- page 1 ---") && some.contains("--- page 3 ---"), "{some}");
    assert!(!results[1].content.iter().any(|p| matches!(p, ContentPart::Image(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_files_end_in_clear_errors_and_the_next_call_is_served() {
    let good = pdf::document(&["still here"], None, None);
    let mut deep = pdf::Pdf::default();
    let nested = format!("<< /Type /Catalog /Deep {}{} >>", "[".repeat(20_000), "]".repeat(20_000));
    let root = deep.add(nested);
    let deep = deep.finish(root);
    let bomb_data = zlib(&vec![0u8; 200 << 20]);
    let bomb = pdf::document(&["x"], None, Some(("/Filter /FlateDecode", bomb_data)));
    let broken = b"%PDF-1.7\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\nxref\n0 2\nBROKEN TABLE\ntrailer\n<< /Root 1 0 R >>\nstartxref\n99999\n%%EOF\n".to_vec();
    // Nesting inside a page's content, which only the parser of that page
    // meets (the file's own objects nest shallowly).
    let content = format!("BT {}{} ET", "[".repeat(200_000), "]".repeat(200_000));
    let inside = pdf::document(&["x"], None, Some(("", content.into_bytes())));
    let huge = vec![b' '; 65 << 20];
    let results = read_each(&[
        ("deep.pdf", deep, json!({})),
        ("bomb.pdf", bomb, json!({})),
        ("broken.pdf", broken, json!({})),
        ("huge.pdf", huge, json!({})),
        ("inside.pdf", inside, json!({})),
        ("good.pdf", good, json!({})),
        ("good.pdf", Vec::new(), json!({ "pages": "2" })),
    ])
    .await;
    let texts: Vec<String> = results.iter().map(Message::text).collect();
    assert!(
        texts[0].contains("deep.pdf is refused: its objects nest deeper than 64 levels"),
        "{}",
        texts[0]
    );
    assert!(
        texts[1].contains("bomb.pdf is refused: a stream decompresses to more than 32 MiB"),
        "{}",
        texts[1]
    );
    assert!(texts[2].contains("broken.pdf is not a readable PDF"), "{}", texts[2]);
    assert!(
        texts[3].contains("huge.pdf is 65 MiB; read_pdf reads files up to 64 MiB"),
        "{}",
        texts[3]
    );
    assert!(
        texts[4].contains(
            "--- page 1 ---\n(this page is not read: its objects nest deeper than 64 levels)"
        ),
        "{}",
        texts[4]
    );
    assert!(
        texts[5].contains("--- page 1 ---\nstill here"),
        "the next call is served: {}",
        texts[5]
    );
    assert!(texts[6].contains("not within the document's pages 1-1"), "{}", texts[6]);
}

/// `reson run --attach`: an image and a PDF join the user's message, the
/// PDF read by the plugin (its text and image); a file of another kind is
/// refused with the kinds that can be attached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reson_run_attaches_images_and_pdfs_to_the_message() {
    use crate::support::api;
    let dir = api::dir_with(&["scripted", "pdf"]);
    let script = api::set_script(dir.path(), json!([{ "text": "I see them" }]));
    dir.config("[permissions]\ndefault = \"allow\"\n");
    let files = tempfile::tempdir().unwrap();
    let png = std::fs::read(support::root().join("tests/guests/picture/src/red.png")).unwrap();
    std::fs::write(files.path().join("red.png"), &png).unwrap();
    let picture = Image { width: 2, height: 2, rgb: vec![200; 12] };
    let doc = pdf::document(&["Invoice 2026-118: 40 hours"], Some(&picture), None);
    std::fs::write(files.path().join("invoice.pdf"), doc).unwrap();
    std::fs::write(files.path().join("notes.txt"), "plain text").unwrap();
    let run = |extra: &[&str]| {
        let mut command = api::reson(dir.path());
        command.args(["run", "--script", &script.to_string_lossy(), "what is attached?"]);
        for file in extra {
            command.args(["--attach", &files.path().join(file).to_string_lossy()]);
        }
        command.output()
    };
    let out = run(&["red.png", "invoice.pdf"]).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let store = FileTraceStore::open(dir.path().join("traces"), Durability::Batched).unwrap();
    let trace = store.list_traces(&Default::default()).await.unwrap().remove(0);
    let first = store.get_messages(&trace.id).await.unwrap().remove(0);
    let parts: Vec<String> = first
        .content
        .iter()
        .map(|p| match p {
            ContentPart::Text { text } => {
                format!("text {}", text.lines().next().unwrap_or_default())
            }
            ContentPart::Image(image) => format!("image {}x{}", image.width, image.height),
            ContentPart::ImageUrl { .. } => "an image not stored".to_owned(),
        })
        .collect();
    assert_eq!(
        parts,
        ["text what is attached?", "text ", "image 2x2", "text ", "image 2x2"],
        "{:?}",
        first.content
    );
    let text = first.text();
    assert!(
        text.contains("[attached image red.png]") && text.contains("[attached PDF invoice.pdf]"),
        "{text}"
    );
    assert!(text.contains("Invoice 2026-118: 40 hours"), "the PDF's text: {text}");

    let out = run(&["notes.txt"]).await.unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("only images (PNG, JPEG, GIF, WebP) and PDFs can be attached"), "{err}");
}

/// The API's run request takes images and PDFs with a message: `reson
/// serve` passes a PDF to the plugin through its uploads directory, and
/// removes it once read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_takes_images_and_pdfs_with_a_message() {
    use crate::support::api;
    use base64::Engine as _;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let dir = api::dir_with(&["scripted", "pdf"]);
    let script = api::set_script(dir.path(), json!([{ "text": "read" }, { "text": "read again" }]));
    dir.config(&api::config(&format!(
        "[plugins.scripted]\ndirs = [{{ path = \".\", access = \"read\" }}]\nconfig = {{ script = \"{}\" }}\n",
        script.display()
    )));
    let server = api::ServerProcess::start(dir.path(), &[]).await;
    let api = &server.api;
    let png = std::fs::read(support::root().join("tests/guests/picture/src/blue.png")).unwrap();
    let doc = pdf::document(&["Contract, page one", "Signatures"], None, None);
    let reply = api
        .post(
            "/api/traces",
            json!({ "messages": [{ "role": "user", "content": "summarise these", "attachments": [
                { "name": "blue.png", "data": b64(&png) },
                { "name": "contract.pdf", "data": b64(&doc) }
            ] }] }),
        )
        .await
        .expect(201);
    let id = reply["trace_id"].as_str().unwrap().to_owned();
    api.finish(&id, 0).await;
    let messages = api.messages(&id, "main_path").await;
    let first = &messages["messages"][0]["content"];
    let kinds: Vec<&str> =
        first.as_array().unwrap().iter().map(|p| p["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["text", "text", "image", "text"], "{first}");
    assert_eq!((first[2]["width"].as_u64(), first[2]["height"].as_u64()), (Some(3), Some(1)));
    let pdf_text = first[3]["text"].as_str().unwrap();
    assert!(
        pdf_text.starts_with("\n[attached PDF contract.pdf]\ncontract.pdf: 2 pages"),
        "{pdf_text}"
    );
    assert!(pdf_text.contains("--- page 2 ---\nSignatures"), "{pdf_text}");
    let uploads = support::cache_dir().join("uploads");
    let left: Vec<_> =
        std::fs::read_dir(&uploads).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(
        left.iter()
            .all(|n| !n.to_string_lossy().starts_with(&server.child.id().unwrap().to_string())),
        "{left:?}"
    );

    // What is not an image or a PDF, or not base64, is refused naming it.
    for (data, says) in [
        (b64(b"just text"), "only images (PNG, JPEG, GIF, WebP) and PDFs can be attached"),
        ("@@@".to_owned(), "`data` is not base64"),
    ] {
        let body = json!({ "messages": [{ "role": "user", "content": "x", "attachments": [{ "name": "notes.txt", "data": data }] }] });
        let message =
            api.post(&format!("/api/traces/{id}/run"), body).await.expect_error(400, "bad_request");
        assert!(message.contains("attachment notes.txt") && message.contains(says), "{message}");
    }
}
