//! Byte budgets on what goes back to the model (LOOP-3, CALL-8): the limits,
//! the per-turn budget, and the one way text is cut: on a UTF-8 boundary,
//! with a marker saying how much was cut. Pure.

use super::projection::ProjectionPart;

/// Default `max_result_bytes` (LOOP-3): the projection of one result.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 32 * 1024;
/// Default `max_turn_result_bytes` (LOOP-3): all projections of one turn.
pub const DEFAULT_MAX_TURN_RESULT_BYTES: usize = 128 * 1024;
/// Default hard cap of a canonical value kept in memory; past it the value is
/// spilled to the attachment store and replaced by a pointer (CALL-8).
pub const DEFAULT_CANONICAL_HARD_CAP_BYTES: usize = 16 * 1024 * 1024;

/// Byte limits on what goes back to the model (LOOP-3, CALL-8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResultLimits {
    /// Projection bytes per result.
    pub max_result_bytes: usize,
    /// Projection bytes per turn (applied by [`TurnBudget`]).
    pub max_turn_result_bytes: usize,
    /// A canonical value larger than this is spilled to the attachment store.
    pub canonical_hard_cap_bytes: usize,
}

impl Default for ResultLimits {
    fn default() -> Self {
        Self {
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            max_turn_result_bytes: DEFAULT_MAX_TURN_RESULT_BYTES,
            canonical_hard_cap_bytes: DEFAULT_CANONICAL_HARD_CAP_BYTES,
        }
    }
}

/// The per-turn budget (LOOP-3): every projection of a turn is charged
/// against it; past it, projections are cut with a marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnBudget {
    max: usize,
    used: usize,
}

impl TurnBudget {
    /// A budget of `max` bytes.
    pub fn new(max: usize) -> Self {
        Self { max, used: 0 }
    }

    /// Charge one projection; returns it (cut if the turn is over budget) and the bytes cut.
    pub fn charge(&mut self, projection: &str) -> (String, usize) {
        let left = self.max.saturating_sub(self.used);
        let (text, cut) = apply_budget(projection, left, "the tool results of one turn");
        self.used += projection.len() - cut;
        (text, cut)
    }
}

/// Cut `text` to at most `max` bytes on a UTF-8 boundary, with an explicit
/// marker saying how much was cut (CALL-8). Returns the text and the bytes cut.
pub fn apply_budget(text: &str, max: usize, what: &str) -> (String, usize) {
    if text.len() <= max {
        return (text.to_owned(), 0);
    }
    let cut_at = floor_char_boundary(text, max);
    let cut = text.len() - cut_at;
    (
        format!("{}{}", &text[..cut_at], cut_marker(cut, what, max)),
        cut,
    )
}

/// The largest index `<= max` that is a character boundary of `text`.
pub fn floor_char_boundary(text: &str, max: usize) -> usize {
    if max >= text.len() {
        return text.len();
    }
    let mut end = max;
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    end
}

/// The smallest index `>= min` that is a character boundary of `text`.
pub fn ceil_char_boundary(text: &str, min: usize) -> usize {
    if min >= text.len() {
        return text.len();
    }
    let mut end = min;
    while !text.is_char_boundary(end) {
        end += 1;
    }
    end
}

/// The marker a cut text ends with (CALL-8).
pub fn cut_marker(cut: usize, what: &str, max: usize) -> String {
    format!(
        "\n[… {cut} bytes cut: {what} is limited to {max} bytes; the full value remains available to programmatic callers]"
    )
}

/// CALL-8: text parts share `max` bytes. The part that crosses the limit is
/// cut on a character boundary and ends with a marker saying how many bytes
/// were cut in all; later text parts are dropped (and counted); admitted
/// images keep their places.
/// `uncopied`: text bytes the projection did not copy (already over the
/// budget, `project_parts_within`), counted as cut.
pub fn budget_parts(
    parts: Vec<ProjectionPart>,
    max: usize,
    uncopied: usize,
) -> (Vec<ProjectionPart>, usize) {
    let text_len = |p: &ProjectionPart| match p {
        ProjectionPart::Text { text } => text.len(),
        ProjectionPart::Image(_) => 0,
    };
    let total: usize = parts.iter().map(text_len).sum::<usize>() + uncopied;
    if total <= max {
        return (parts, 0);
    }
    let mut left = max;
    let mut kept = 0usize;
    let mut out: Vec<ProjectionPart> = Vec::with_capacity(parts.len());
    let mut cut_index = None;
    for p in parts {
        match p {
            ProjectionPart::Text { text } if cut_index.is_none() => {
                if text.len() <= left {
                    left -= text.len();
                    kept += text.len();
                    out.push(ProjectionPart::Text { text });
                } else {
                    let end = floor_char_boundary(&text, left);
                    kept += end;
                    cut_index = Some(out.len());
                    out.push(ProjectionPart::Text {
                        text: text[..end].to_owned(),
                    });
                }
            }
            ProjectionPart::Text { .. } => {}
            img @ ProjectionPart::Image(_) => out.push(img),
        }
    }
    let cut = total - kept;
    if let Some(ProjectionPart::Text { text }) = cut_index.and_then(|i| out.get_mut(i)) {
        text.push_str(&cut_marker(cut, "a tool result", max));
    }
    (out, cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_budget_is_shared_by_every_result_of_the_turn() {
        // LOOP-3
        let mut b = TurnBudget::new(10);
        assert_eq!(b.charge("123456"), ("123456".to_owned(), 0));
        let (t, cut) = b.charge("abcdefgh");
        assert_eq!(cut, 4);
        assert!(
            t.starts_with("abcd\n[… 4 bytes cut: the tool results of one turn"),
            "{t}"
        );
        let (t, cut) = b.charge("x");
        assert_eq!(cut, 1);
        assert!(t.starts_with("\n[… 1 bytes cut"), "{t}");
    }

    #[test]
    fn budgets_cut_on_a_char_boundary_and_say_how_much() {
        // CALL-8
        let (t, cut) = apply_budget("héllo wörld", 2, "a tool result");
        assert_eq!(cut, "héllo wörld".len() - 1);
        assert!(
            t.starts_with("h\n[… 12 bytes cut: a tool result is limited to 2 bytes"),
            "{t}"
        );
        assert_eq!(apply_budget("short", 10, "x"), ("short".to_owned(), 0));
    }
}

#[cfg(test)]
mod bounded_projection_tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::budget_parts;
    use crate::messages::projection::{project_parts, project_parts_within};

    #[test]
    fn projecting_within_the_budget_gives_what_projecting_in_whole_then_cutting_gives() {
        // design.md's one-copy rule must not change what the model sees (CALL-8).
        let values = [
            json!({"content": [{"type": "text", "text": "héllo wörld, ünïcödé"}]}),
            json!({"content": [
                {"type": "text", "text": "first"},
                {"type": "text", "text": "  "},
                {"type": "text", "text": "dritte Zeile ✓"},
                {"type": "resource_link", "name": "n", "uri": "file:///x"},
            ]}),
            json!({"content": [{"type": "text", "text": "   "}], "structuredContent": {"a": 1}}),
            json!({"content": []}),
            json!({"content": [{"type": "text", "text": "x".repeat(5000)}]}),
        ];
        for value in &values {
            for max in [0, 1, 2, 3, 5, 8, 13, 21, 100, 10_000] {
                let whole = budget_parts(project_parts(value, &BTreeMap::new()), max, 0);
                let (parts, skipped) = project_parts_within(value, &BTreeMap::new(), max);
                let within = budget_parts(parts, max, skipped);
                assert_eq!(within, whole, "max {max}, value {value}");
            }
        }
    }
}

#[cfg(test)]
mod props {
    //! Property tests of the byte budgets.

    use super::*;
    use crate::messages::prop_gen::config;
    use proptest::prelude::*;

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            ("[a-zé漢😀\n]{1,4}", 0usize..200).prop_map(|(unit, n)| unit.repeat(n)),
        ]
    }

    proptest! {
        #![proptest_config(config(512))]

        #[test]
        fn char_boundaries_are_the_nearest_ones(text in text(), at in 0usize..1000) {
            let floor = floor_char_boundary(&text, at);
            let ceil = ceil_char_boundary(&text, at);
            prop_assert!(text.is_char_boundary(floor) && text.is_char_boundary(ceil));
            prop_assert!(floor <= at.min(text.len()) && ceil >= at.min(text.len()));
            prop_assert!((floor + 1..=at.min(text.len())).all(|i| !text.is_char_boundary(i)));
            prop_assert!((at.min(text.len())..ceil).all(|i| !text.is_char_boundary(i)));
        }

        #[test]
        fn a_cut_text_keeps_at_most_the_budget_and_says_how_much_was_cut(
            text in text(),
            max in prop_oneof![0usize..8, 8usize..1000],
        ) {
            // CALL-8: on a UTF-8 boundary, with a marker naming the cut.
            let (out, cut) = apply_budget(&text, max, "a tool result");
            if text.len() <= max {
                prop_assert_eq!((out.as_str(), cut), (text.as_str(), 0));
            } else {
                let kept = floor_char_boundary(&text, max);
                prop_assert_eq!(cut, text.len() - kept);
                let marker = cut_marker(cut, "a tool result", max);
                prop_assert_eq!(out, format!("{}{marker}", &text[..kept]));
            }
        }

        #[test]
        fn a_turn_never_keeps_more_than_its_budget(
            texts in prop::collection::vec(text(), 0..8),
            max in 0usize..2000,
        ) {
            // LOOP-3: every projection of a turn is charged against one budget.
            let mut turn = TurnBudget::new(max);
            let mut kept = 0usize;
            for text in &texts {
                let (out, cut) = turn.charge(text);
                prop_assert!(cut <= text.len());
                let body = text.len() - cut;
                prop_assert!(out.starts_with(&text[..body]));
                prop_assert_eq!(cut == 0, out == *text);
                kept += body;
            }
            prop_assert!(kept <= max);
            let total: usize = texts.iter().map(String::len).sum();
            if total <= max {
                prop_assert_eq!(kept, total, "nothing is cut within the budget");
            }
        }
    }
}
