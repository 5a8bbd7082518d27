//! `markdown-plan`: parses a plan the model wrote as a Markdown list.
//!
//! ```markdown
//! ## Plan
//! 1. Find where the greeting is built
//!    - [x] search for "Hello"
//!    - [ ] read the matches,
//!      keeping the tests in mind
//! 2. **Rename it**
//! ```
//!
//! - Items are numbered (`1.`, `1)`), bulleted (`-`, `*`, `+`) or checkbox
//!   (`- [ ]`, `- [x]`) list items; kinds may be mixed.
//! - An item indented at least two columns (or a tab) deeper than an earlier
//!   item is its sub-step. Steps are listed in the order they appear, so a
//!   parent always comes before its children.
//! - Other lines are ignored (headings, prose, blank lines, code fence
//!   lines), except a line indented deeper than an open item: it continues
//!   the deepest such item's description, joined with a space. An ignored
//!   line that is not indented under an item ends the list, so that a later
//!   indented list starts at the top level again.
//! - Descriptions are trimmed, and one wholly wrapped in `**` or `__` is
//!   unwrapped.
//!
//! Errors: no list items is `no-plan("no numbered, bulleted or checkbox list
//! found")`; an item without text (`1.`, `- [ ]`) is
//! `step-without-description(i)`, `i` being its index among the steps.

mod line;

use reson_sdk::plan::{ParseError, Plan, PlanStep};

/// The error when the answer holds no list item.
const NO_LIST: &str = "no numbered, bulleted or checkbox list found";

/// How much deeper than an item another item must be indented to be its
/// sub-step; a single space is too easily a typo.
const NESTING_INDENT: usize = 2;

fn parse(raw: String, _goal: String) -> Result<Plan, ParseError> {
    Ok(Plan { steps: steps(&raw)? })
}

/// An item that later items can nest under and later lines can continue.
struct Open {
    indent: usize,
    index: usize,
}

/// The list items of `raw`, in order, with their nesting.
fn steps(raw: &str) -> Result<Vec<PlanStep>, ParseError> {
    let mut steps: Vec<PlanStep> = Vec::new();
    // The current item and its ancestors, outermost first.
    let mut open: Vec<Open> = Vec::new();
    for text in raw.lines() {
        let (indent, body) = line::split_indent(text);
        // Fence lines are markup, not text: a plan wrapped in a ```markdown
        // block is still read, and a command fenced under an item continues it.
        if body.is_empty() || body.starts_with("```") || body.starts_with("~~~") {
            continue;
        }
        if let Some(item) = line::item_text(body) {
            while open.last().is_some_and(|parent| indent < parent.indent + NESTING_INDENT) {
                open.pop();
            }
            // Indices fit: a guest's memory is 32-bit, and each step takes bytes.
            let parent = open.last().map(|parent| parent.index as u32);
            open.push(Open { indent, index: steps.len() });
            steps.push(PlanStep { description: item.to_owned(), parent });
        } else if let Some(item) = open.iter().rev().find(|item| item.indent < indent) {
            let description = &mut steps[item.index].description;
            if !description.is_empty() {
                description.push(' ');
            }
            description.push_str(body.trim_end());
        } else {
            // Prose or a heading outside every item ends the list, so that a
            // later indented list is not nested under an item it follows.
            open.clear();
        }
    }
    if steps.is_empty() {
        return Err(ParseError::NoPlan(NO_LIST.to_owned()));
    }
    for (index, step) in steps.iter_mut().enumerate() {
        step.description = unwrap_strong(&step.description).to_owned();
        if step.description.is_empty() {
            return Err(ParseError::StepWithoutDescription(index as u32));
        }
    }
    Ok(steps)
}

/// `description` trimmed, without the `**` or `__` pair around it when it
/// is bold as a whole: models often bold every item, and the markers mean
/// nothing in a step. `**a** and **b**` is left alone; `****` is empty.
fn unwrap_strong(description: &str) -> &str {
    let description = description.trim();
    ["**", "__"]
        .into_iter()
        .find_map(|marker| {
            let inner = description.strip_prefix(marker)?.strip_suffix(marker)?;
            (!inner.contains(marker)).then(|| inner.trim())
        })
        .unwrap_or(description)
}

reson_sdk::export_plan_parser!(parse);

#[cfg(test)]
mod tests {
    use super::*;

    /// The steps as `(description, parent)` pairs: the generated types do
    /// not implement `PartialEq`.
    fn parsed(raw: &str) -> Vec<(String, Option<u32>)> {
        let plan = parse(raw.to_owned(), "the goal".to_owned()).unwrap();
        plan.steps.into_iter().map(|step| (step.description, step.parent)).collect()
    }

    fn step(description: &str, parent: Option<u32>) -> (String, Option<u32>) {
        (description.to_owned(), parent)
    }

    fn top(descriptions: &[&str]) -> Vec<(String, Option<u32>)> {
        descriptions.iter().map(|description| step(description, None)).collect()
    }

    fn without_description(raw: &str) -> u32 {
        match steps(raw) {
            Err(ParseError::StepWithoutDescription(index)) => index,
            other => panic!("expected a step without description, got {other:?}"),
        }
    }

    #[test]
    fn numbered_lists_are_steps() {
        assert_eq!(parsed("1. Read\n2. Edit\n3. Test"), top(&["Read", "Edit", "Test"]));
        assert_eq!(parsed("1) Read\n2) Edit"), top(&["Read", "Edit"]));
    }

    #[test]
    fn bulleted_lists_are_steps() {
        assert_eq!(parsed("- Read\n* Edit\n+ Test"), top(&["Read", "Edit", "Test"]));
    }

    #[test]
    fn checkbox_lists_are_steps() {
        assert_eq!(parsed("- [ ] Read\n- [x] Edit\n- [X] Test"), top(&["Read", "Edit", "Test"]));
    }

    #[test]
    fn descriptions_are_trimmed() {
        assert_eq!(parsed("1.   Read   \n-\tEdit\t\r\n"), top(&["Read", "Edit"]));
    }

    #[test]
    fn crlf_line_endings_are_read() {
        assert_eq!(
            parsed("1. Read\r\n   - file\r\n2. Edit\r\n"),
            [step("Read", None), step("file", Some(0)), step("Edit", None)]
        );
    }

    #[test]
    fn deeper_indentation_nests_sub_steps() {
        let raw = "\
1. Find it
   - grep
     * [ ] for Hello
     * [x] for Hi
   - read
2. Rename it
\t- in code
\t\t+ and tests
- Check";
        assert_eq!(
            parsed(raw),
            [
                step("Find it", None),
                step("grep", Some(0)),
                step("for Hello", Some(1)),
                step("for Hi", Some(1)),
                step("read", Some(0)),
                step("Rename it", None),
                step("in code", Some(5)),
                step("and tests", Some(6)),
                step("Check", None),
            ]
        );
    }

    #[test]
    fn two_columns_deeper_nest_and_one_does_not() {
        assert_eq!(parsed("- a\n  - b"), [step("a", None), step("b", Some(0))]);
        assert_eq!(parsed("- a\n - b"), top(&["a", "b"]));
        // Under a nested item, one column deeper is a sibling of that item.
        assert_eq!(
            parsed("- a\n  - b\n   - c"),
            [step("a", None), step("b", Some(0)), step("c", Some(0))]
        );
    }

    #[test]
    fn an_indented_list_nests_relative_to_its_own_first_item() {
        assert_eq!(
            parsed("  - a\n  - b\n    - c"),
            [step("a", None), step("b", None), step("c", Some(1))]
        );
    }

    #[test]
    fn headings_prose_and_blank_lines_are_ignored() {
        let raw = "# Plan\n\nHere is what I'll do:\n\n1. Read\n\n2. Edit\n\n## Then\n- Test\n\nThat's all.";
        assert_eq!(parsed(raw), top(&["Read", "Edit", "Test"]));
    }

    #[test]
    fn a_list_in_a_code_fence_is_read() {
        assert_eq!(parsed("```markdown\n1. Read\n2. Edit\n```"), top(&["Read", "Edit"]));
    }

    #[test]
    fn horizontal_rules_and_bold_lines_are_not_items() {
        let raw = "**Phase one**\n- Read\n---\n* * *\n*Phase two*\n- Edit\n___";
        assert_eq!(parsed(raw), top(&["Read", "Edit"]));
    }

    #[test]
    fn indented_lines_continue_the_item_above() {
        let raw = "1. Read the code\n   to understand it.\n\n   Then take notes.\n2. Edit";
        assert_eq!(parsed(raw), top(&["Read the code to understand it. Then take notes.", "Edit"]));
        // A code fence's lines are dropped, its content continues the item.
        let fenced = "- Run\n  ```sh\n  cargo test\n  ```\n- Commit";
        assert_eq!(parsed(fenced), top(&["Run cargo test", "Commit"]));
    }

    #[test]
    fn a_continuation_goes_to_the_deepest_item_it_is_indented_under() {
        let raw = "1. Find it\n   - grep\n     for Hello\n   and read it\n2. Rename it";
        assert_eq!(
            parsed(raw),
            [
                step("Find it and read it", None),
                step("grep for Hello", Some(0)),
                step("Rename it", None)
            ]
        );
    }

    #[test]
    fn unindented_prose_ends_the_list() {
        let raw = "- Read\nNote: carefully.\n  more prose\n  - Edit";
        assert_eq!(parsed(raw), top(&["Read", "Edit"]));
    }

    #[test]
    fn a_wholly_bold_description_is_unwrapped() {
        let raw =
            "1. **Read**\n2. __Edit__\n3. ** Test **\n4. **Lint** and **format**\n5. **Ship** it";
        assert_eq!(
            parsed(raw),
            top(&["Read", "Edit", "Test", "**Lint** and **format**", "**Ship** it"])
        );
    }

    #[test]
    fn an_item_without_text_filled_by_a_continuation_is_a_step() {
        assert_eq!(parsed("1.\n   Read\n2. Edit"), top(&["Read", "Edit"]));
    }

    #[test]
    fn no_list_is_no_plan() {
        for raw in ["", "\n\n", "I cannot plan this.", "# Plan\n\nJust do it.", "---\n**Bold**"] {
            match steps(raw) {
                Err(ParseError::NoPlan(message)) => assert_eq!(message, NO_LIST, "{raw:?}"),
                other => panic!("{raw:?}: expected no plan, got {other:?}"),
            }
        }
    }

    #[test]
    fn an_item_without_text_is_a_step_without_description() {
        assert_eq!(without_description("1.\n2. Edit"), 0);
        assert_eq!(without_description("- [ ]\n- [x] Edit"), 0);
        assert_eq!(without_description("- Read\n-"), 1);
        assert_eq!(without_description("- Read\n  - a\n  - [x]  \n- Edit"), 2);
        assert_eq!(without_description("1. Read\n2. ****\n3. Edit"), 1);
    }
}
