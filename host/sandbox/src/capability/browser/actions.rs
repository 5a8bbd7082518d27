//! What a plugin can do to a page. Element lookups, reading and listing
//! run as one script (`page.js`) in the page's isolated world, where the
//! page's own scripts cannot change what it calls; clicks and typing are
//! real input events.

use super::BrowserError;
use super::limits::{MAX_SCREENSHOT_HEIGHT, NETWORK_QUIET, SETTLE};
use super::session::PageSlot;
use crate::contract::bindings::tool::reson::plugin::browser::{FormField, Link, Locator};
use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::page::{
    CaptureScreenshotFormat, CreateIsolatedWorldParams, GetNavigationHistoryParams,
    NavigateToHistoryEntryParams, Viewport,
};
use chromiumoxide::cdp::js_protocol::runtime::{EvaluateParams, ExecutionContextId};
use chromiumoxide::element::Element;
use chromiumoxide::page::ScreenshotParams;
use reson_text::text::untrusted;
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const SCRIPT: &str = include_str!("page.js");

/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(50);

fn failed(what: &str) -> impl Fn(chromiumoxide::error::CdpError) -> BrowserError + '_ {
    move |e| BrowserError::Failed(format!("{what}: {e}"))
}

fn locator_json(locator: &Locator) -> Value {
    match locator {
        Locator::Css(selector) => json!({ "css": selector }),
        Locator::Role(role) => json!({ "role": role.role, "name": role.name }),
    }
}

fn describe(locator: &Locator) -> String {
    match locator {
        Locator::Css(selector) => format!("css `{selector}`"),
        Locator::Role(role) => match &role.name {
            Some(name) => format!("role `{}` named `{name}`", role.role),
            None => format!("role `{}`", role.role),
        },
    }
}

/// The name of Reson's isolated world in every page.
const WORLD: &str = "reson";

/// The execution context of Reson's isolated world in the page's current
/// document. Chromium makes it on demand and keeps its globals for the
/// document's life; asking each time, rather than tracking contexts from
/// events, means a script never lands in an earlier document, nor in the
/// page's own world (where its scripts could patch what `page.js` calls).
async fn world(page: &Page) -> Result<ExecutionContextId, BrowserError> {
    let frame = page
        .mainframe()
        .await
        .map_err(failed("finding the page's frame"))?
        .ok_or_else(|| BrowserError::Failed("the page has no frame yet".into()))?;
    let created = page
        .execute(CreateIsolatedWorldParams {
            frame_id: frame,
            world_name: Some(WORLD.into()),
            grant_univeral_access: Some(false),
        })
        .await
        .map_err(failed("opening the page's isolated world"))?;
    Ok(created.result.execution_context_id)
}

/// Runs one operation of `page.js` in Reson's isolated world.
async fn script(page: &Page, op: &str, arg: Value) -> Result<Value, BrowserError> {
    let expression = format!("({SCRIPT})({}, {arg})", json!(op));
    let params = EvaluateParams::builder()
        .expression(expression)
        .return_by_value(true)
        .await_promise(true)
        .context_id(world(page).await?)
        .build()
        .map_err(BrowserError::Failed)?;
    let result = page.evaluate_expression(params).await.map_err(failed("page script"))?;
    let value = result.value().cloned().unwrap_or(Value::Null);
    if let Some(error) = value.get("error").and_then(Value::as_str) {
        return Err(BrowserError::Failed(error.to_owned()));
    }
    Ok(value)
}

/// Makes `page` the one in front. A page behind another (its popup, most
/// often) draws no frames, and input or a screenshot waits for one: the
/// call would hang until its deadline.
async fn to_front(page: &Page) -> Result<(), BrowserError> {
    page.bring_to_front().await.map(drop).map_err(failed("bringing the page to the front"))
}

/// What `mark` found.
#[derive(Deserialize)]
struct Marked {
    #[serde(rename = "ref")]
    reference: String,
    tag: String,
    #[serde(rename = "type")]
    kind: String,
}

/// Finds the element, scrolled into view, or says nothing matches.
async fn locate(page: &Page, locator: &Locator) -> Result<(Element, Marked), BrowserError> {
    let value = script(page, "mark", locator_json(locator)).await?;
    if value.get("missing").is_some() {
        return Err(BrowserError::NotFound(describe(locator)));
    }
    let marked: Marked = serde_json::from_value(value)
        .map_err(|e| BrowserError::Failed(format!("page script answered oddly: {e}")))?;
    let element = page
        .find_element(format!("[data-reson-ref=\"{}\"]", marked.reference))
        .await
        .map_err(|_| BrowserError::NotFound(describe(locator)))?;
    Ok((element, marked))
}

/// How long an action that may navigate (a click, Enter) waits for a new
/// document to start before taking it that none will.
const NAVIGATION_GRACE: Duration = Duration::from_millis(1000);

/// Marks the current document, so that [`settle`] can tell a new one, and
/// forgets what earlier actions left to report.
async fn mark_document(slot: &PageSlot) -> Result<String, BrowserError> {
    slot.activity.refused_navigation();
    slot.activity.download();
    let mark = format!("{:016x}", fastrand::u64(..));
    script(&slot.page, "mark-document", json!(mark)).await?;
    Ok(mark)
}

/// What ends an action at once: the navigation it started was refused, or
/// turned into a download (which Chromium refuses).
fn outcome(slot: &PageSlot) -> impl FnMut() -> Option<Result<(), String>> + '_ {
    || {
        if let Some(url) = slot.activity.download() {
            return Some(Err(format!(
                "{} is a download (an attachment, or of a type the browser does not show): \
                 downloads are off",
                untrusted("URL", &url)
            )));
        }
        let refused = slot.activity.refused_navigation()?;
        Some(Err(format!("net::ERR_BLOCKED_BY_CLIENT at {}", untrusted("URL", &refused))))
    }
}

/// The page's document as [`settle`] sees it.
#[derive(Deserialize)]
struct DocumentState {
    marked: bool,
    ready: String,
    url: String,
    title: String,
}

/// The title of the page's current document; empty when no script can
/// run there (an error page, a PDF).
pub(super) async fn title(page: &Page) -> String {
    let state = script(page, "document", Value::Null).await;
    state
        .ok()
        .and_then(|v| serde_json::from_value::<DocumentState>(v).ok())
        .map(|s| s.title)
        .unwrap_or_default()
}

/// Waits, after an action on a marked document, for the document that
/// action loads to finish loading: up to `grace` for one to start (a
/// click may load nothing), then until it is complete, within [`SETTLE`].
/// The main frame's `load` is what counts: a frame the page may not load
/// (a `file:` frame) does not hold it up. Fails when the new document is
/// Chromium's error page, or when `outcome` reports a failed navigation.
async fn settle(
    page: &Page,
    mark: &str,
    grace: Duration,
    mut outcome: impl FnMut() -> Option<Result<(), String>>,
) -> Result<(), BrowserError> {
    let started = Instant::now();
    loop {
        match outcome() {
            Some(Err(why)) => return Err(BrowserError::Failed(why)),
            Some(Ok(())) => return Ok(()),
            None => {}
        }
        // A script error while the document changes is not an answer yet.
        if let Ok(value) = script(page, "document", json!(mark)).await
            && let Ok(state) = serde_json::from_value::<DocumentState>(value)
        {
            if !state.marked && state.url.starts_with("chrome-error:") {
                // The refusal that led here, when there was one, is the
                // better answer; it may have come while the script ran.
                return match outcome() {
                    Some(result) => result.map_err(BrowserError::Failed),
                    None => Err(BrowserError::Failed("the page could not be loaded".into())),
                };
            }
            if !state.marked && state.ready == "complete" {
                return Ok(());
            }
            if state.marked && started.elapsed() >= grace {
                return if grace >= SETTLE { Err(BrowserError::Timeout) } else { Ok(()) };
            }
        }
        if started.elapsed() >= SETTLE {
            return Err(BrowserError::Timeout);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Whether the page shows Chromium's error page, from which a page's
/// script cannot navigate.
pub(super) async fn on_error_page(slot: &PageSlot) -> bool {
    script(&slot.page, "document", json!(""))
        .await
        .ok()
        .and_then(|v| v.get("url").and_then(Value::as_str).map(|u| u.starts_with("chrome-error:")))
        .unwrap_or(false)
}

/// Loads `url` and waits for its main frame to load. The navigation starts
/// inside the page, not with `Page.navigate`: the DevTools client waits
/// for every frame of that one before it sends the next, forever for a
/// frame the page may not load (a `file:` frame); [`settle`] waits for
/// the main frame.
pub(super) async fn navigate(slot: &PageSlot, url: &str) -> Result<(), BrowserError> {
    let mark = mark_document(slot).await?;
    script(&slot.page, "go", json!(url)).await?;
    settle(&slot.page, &mark, SETTLE, outcome(slot)).await.map_err(|e| match e {
        BrowserError::Failed(why) => BrowserError::Failed(format!("loading {url}: {why}")),
        other => other,
    })
}

/// Goes one entry back in the page's history.
pub(super) async fn back(slot: &PageSlot) -> Result<(), BrowserError> {
    let history = slot
        .page
        .execute(GetNavigationHistoryParams::default())
        .await
        .map_err(failed("reading the history"))?;
    let index = usize::try_from(history.result.current_index).unwrap_or(0);
    let Some(entry) = index.checked_sub(1).and_then(|i| history.result.entries.get(i)) else {
        return Err(BrowserError::Failed("there is no earlier page in this page's history".into()));
    };
    let mark = mark_document(slot).await?;
    slot.page
        .execute(NavigateToHistoryEntryParams::new(entry.id))
        .await
        .map_err(failed("going back"))?;
    settle(&slot.page, &mark, SETTLE, outcome(slot)).await
}

pub(super) async fn click(slot: &PageSlot, target: &Locator) -> Result<(), BrowserError> {
    let (element, _) = locate(&slot.page, target).await?;
    let mark = mark_document(slot).await?;
    to_front(&slot.page).await?;
    element.click().await.map_err(failed("clicking"))?;
    settle(&slot.page, &mark, NAVIGATION_GRACE, outcome(slot)).await
}

/// Replaces the value of a field with `text` (a `select` picks the option
/// of that value or label), then presses Enter when `submit`.
pub(super) async fn fill(
    slot: &PageSlot,
    target: &Locator,
    text: &str,
    submit: bool,
) -> Result<(), BrowserError> {
    let page = &slot.page;
    let (element, marked) = locate(page, target).await?;
    if marked.tag == "select" {
        let chosen =
            script(page, "choose", json!({ "ref": marked.reference, "text": text })).await?;
        if let Some(options) = chosen.get("options").and_then(Value::as_array) {
            let options: Vec<&str> = options.iter().filter_map(Value::as_str).collect();
            return Err(BrowserError::Failed(format!(
                "{} has no option {text:?}; its options: {}",
                describe(target),
                untrusted("option labels", &options.join(", "))
            )));
        }
    } else {
        if matches!(marked.kind.as_str(), "checkbox" | "radio" | "submit" | "button" | "file") {
            return Err(BrowserError::Failed(format!(
                "{} is a {} input: click it instead of typing into it",
                describe(target),
                marked.kind
            )));
        }
        script(page, "clear", json!(marked.reference)).await?;
        to_front(page).await?;
        element.focus().await.map_err(failed("focusing"))?;
        element.type_str(text).await.map_err(failed("typing"))?;
    }
    if submit {
        let mark = mark_document(slot).await?;
        to_front(page).await?;
        element.press_key("Enter").await.map_err(failed("pressing Enter"))?;
        settle(page, &mark, NAVIGATION_GRACE, outcome(slot)).await?;
    }
    Ok(())
}

/// The page, or the element, as text or Markdown.
pub(super) async fn read(
    slot: &PageSlot,
    markdown: bool,
    element: Option<&Locator>,
) -> Result<String, BrowserError> {
    let arg = json!({ "markdown": markdown, "loc": element.map(locator_json) });
    let value = script(&slot.page, "read", arg).await?;
    if value.get("missing").is_some() {
        let what = element.map_or_else(|| "the page".to_owned(), describe);
        return Err(BrowserError::NotFound(what));
    }
    Ok(value.get("content").and_then(Value::as_str).unwrap_or_default().to_owned())
}

pub(super) async fn links(slot: &PageSlot) -> Result<Vec<Link>, BrowserError> {
    #[derive(Deserialize)]
    struct Raw {
        text: String,
        href: String,
    }
    let value = script(&slot.page, "links", Value::Null).await?;
    let raw: Vec<Raw> = serde_json::from_value(value).unwrap_or_default();
    Ok(raw.into_iter().map(|l| Link { text: l.text, href: l.href }).collect())
}

pub(super) async fn form_fields(slot: &PageSlot) -> Result<Vec<FormField>, BrowserError> {
    #[derive(Deserialize)]
    struct Raw {
        selector: String,
        tag: String,
        kind: String,
        name: String,
        label: String,
        value: String,
    }
    let value = script(&slot.page, "fields", Value::Null).await?;
    let raw: Vec<Raw> = serde_json::from_value(value).unwrap_or_default();
    Ok(raw
        .into_iter()
        .map(|f| FormField {
            selector: f.selector,
            tag: f.tag,
            kind: f.kind,
            name: f.name,
            label: f.label,
            value: f.value,
        })
        .collect())
}

/// A PNG of the viewport, or of the page from its top down to
/// [`MAX_SCREENSHOT_HEIGHT`].
pub(super) async fn screenshot(slot: &PageSlot, full_page: bool) -> Result<Vec<u8>, BrowserError> {
    let mut params = ScreenshotParams::builder().format(CaptureScreenshotFormat::Png);
    if full_page {
        let size = script(&slot.page, "size", Value::Null).await?;
        let dimension = |key: &str| size.get(key).and_then(Value::as_f64).unwrap_or(1.0).max(1.0);
        let clip = Viewport {
            x: 0.0,
            y: 0.0,
            width: dimension("width"),
            height: dimension("height").min(MAX_SCREENSHOT_HEIGHT),
            scale: 1.0,
        };
        params = params.clip(clip).capture_beyond_viewport(true);
    }
    to_front(&slot.page).await?;
    slot.page.screenshot(params.build()).await.map_err(failed("taking a screenshot"))
}

/// Waits until an element matches.
pub(super) async fn wait_for_element(
    slot: &PageSlot,
    target: &Locator,
) -> Result<(), BrowserError> {
    loop {
        // A script error while the page changes is not an answer yet; a
        // selector that does not parse never will be.
        match script(&slot.page, "exists", locator_json(target)).await {
            Ok(value) if value.get("found").is_some() => return Ok(()),
            Err(BrowserError::Failed(e)) if e.starts_with("invalid CSS") => {
                return Err(BrowserError::Failed(e));
            }
            _ => {}
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until the page has loaded and no request has been in flight for
/// a while.
pub(super) async fn wait_for_network_idle(slot: &PageSlot) -> Result<(), BrowserError> {
    loop {
        let loaded = script(&slot.page, "ready", Value::Null).await.is_ok_and(|s| s == "complete");
        if loaded && slot.activity.idle_for(NETWORK_QUIET) {
            return Ok(());
        }
        tokio::time::sleep(POLL).await;
    }
}
