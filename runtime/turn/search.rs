//! Tool search with deferred loading (issue 36): over a threshold the
//! model is first offered one tool, [`SEARCH_TOOL`], instead of the whole
//! catalog. Its answer is the matching tools' definitions, which are
//! offered from the next round on, appended after what was offered before
//! (so a prompt cache over the earlier tools survives) in the order they
//! were found (so the list is the same however often it is rebuilt).
//!
//! The search is BM25 over each tool's name (split at `_`, `-`, `.` and
//! case changes), title, description and parameter names, built once per
//! turn from the tools offered.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::model::{Offer, ToolSpec};

/// The search tool's name.
pub const SEARCH_TOOL: &str = "mcpvisor_tool_search";

/// Matches a search returns unless the model asks for another count.
const DEFAULT_LIMIT: usize = 5;

/// Most matches one search returns.
const MAX_LIMIT: usize = 20;

/// BM25's term-frequency saturation and length normalisation.
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// The search tool as offered to the model: a plain function, or the
/// search of the provider's own deferred loading ([`Offer::NativeSearch`]).
pub fn search_spec(total: usize, offer: Offer) -> ToolSpec {
    ToolSpec {
        name: SEARCH_TOOL.to_owned(),
        description: format!(
            "Search the {total} tools available in this session by keywords (what the tool does, \
             the service, a parameter). Returns the matching tools' definitions; they can be \
             called from your next step on. Search first whenever you need a tool you have not \
             been given."
        ),
        parameters: json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Keywords, e.g. \"create github issue\""},
                "limit": {"type": "integer", "description": format!("At most this many tools (default {DEFAULT_LIMIT}, at most {MAX_LIMIT})")},
            },
            "required": ["query"],
        }),
        offer,
    }
}

/// The words of `text`: lowercase, split at anything not alphanumeric and
/// at case changes (`createIssue` → `create`, `issue`).
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut prev_lower = false;
    for c in text.chars() {
        if !c.is_alphanumeric() {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
        prev_lower = c.is_lowercase() || c.is_numeric();
        word.extend(c.to_lowercase());
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// A BM25 index over tools.
#[derive(Debug, Default)]
pub struct ToolIndex {
    /// Per tool: term → count, and its length in terms.
    docs: Vec<(HashMap<String, usize>, usize)>,
    /// Term → tools holding it.
    df: HashMap<String, usize>,
    avg_len: f64,
}

impl ToolIndex {
    /// Index `specs` (their order is the index's).
    pub fn build(specs: &[ToolSpec]) -> Self {
        let mut docs = Vec::with_capacity(specs.len());
        let mut df: HashMap<String, usize> = HashMap::new();
        let mut total = 0usize;
        for s in specs {
            let mut terms = words(&s.name);
            terms.extend(words(&s.description));
            if let Some(props) = s.parameters.get("properties").and_then(Value::as_object) {
                for name in props.keys() {
                    terms.extend(words(name));
                }
            }
            let mut tf: HashMap<String, usize> = HashMap::new();
            for t in &terms {
                *tf.entry(t.clone()).or_default() += 1;
            }
            for t in tf.keys() {
                *df.entry(t.clone()).or_default() += 1;
            }
            total += terms.len();
            docs.push((tf, terms.len()));
        }
        let avg_len = if docs.is_empty() {
            0.0
        } else {
            total as f64 / docs.len() as f64
        };
        Self { docs, df, avg_len }
    }

    /// The tools matching `query`, best first (ties in index order), at
    /// most `limit`; none when no word of the query is in any tool.
    pub fn search(&self, query: &str, limit: usize) -> Vec<usize> {
        let n = self.docs.len() as f64;
        let terms = words(query);
        let mut scored: Vec<(f64, usize)> = self
            .docs
            .iter()
            .enumerate()
            .filter_map(|(i, (tf, len))| {
                let score: f64 = terms
                    .iter()
                    .filter_map(|t| {
                        let f = *tf.get(t)? as f64;
                        let df = *self.df.get(t)? as f64;
                        let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                        let norm = 1.0 - B + B * (*len as f64) / self.avg_len.max(1e-9);
                        Some(idf * f * (K1 + 1.0) / (f + K1 * norm))
                    })
                    .sum();
                (score > 0.0).then_some((score, i))
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.into_iter().take(limit).map(|(_, i)| i).collect()
    }
}

/// What a search call asks: its query and how many, from its arguments.
pub fn query_of(arguments: &Value) -> (String, usize) {
    let query = arguments
        .get("query")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let limit = arguments
        .get("limit")
        .and_then(Value::as_u64)
        .and_then(|l| usize::try_from(l).ok())
        .unwrap_or(DEFAULT_LIMIT)
        .clamp(1, MAX_LIMIT);
    (query, limit)
}

/// The model's answer for a search: the found tools' definitions, or a
/// sentence saying nothing matched.
pub fn answer(specs: &[ToolSpec], found: &[usize], query: &str) -> String {
    if found.is_empty() {
        return format!(
            "No tool matches {query:?}. Try other words (what the tool does, or the service's name)."
        );
    }
    let tools: Vec<Value> = found
        .iter()
        .filter_map(|&i| specs.get(i))
        .map(|s| json!({"name": s.name, "description": s.description, "parameters": s.parameters}))
        .collect();
    format!(
        "{} tool(s) found; they can be called from your next step on:\n{}",
        tools.len(),
        Value::Array(tools)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, description: &str, params: &[&str]) -> ToolSpec {
        let props: serde_json::Map<String, Value> = params
            .iter()
            .map(|p| ((*p).to_owned(), json!({"type": "string"})))
            .collect();
        ToolSpec {
            name: name.to_owned(),
            description: description.to_owned(),
            parameters: json!({"type": "object", "properties": props}),
            offer: Offer::Eager,
        }
    }

    #[test]
    fn words_split_names_and_cases() {
        assert_eq!(
            words("mcp__github__createIssue v2-API"),
            ["mcp", "github", "create", "issue", "v2", "api"]
        );
    }

    // The tool whose name and description hold the query's words ranks
    // first; a parameter name counts; ties keep the catalog's order; a
    // query of unknown words finds nothing.
    #[test]
    fn bm25_ranks_by_name_description_and_parameters() {
        let specs = vec![
            spec(
                "mcp__gh__list_issues",
                "List issues of a repository",
                &["repo"],
            ),
            spec(
                "mcp__gh__create_issue",
                "Create an issue in a repository",
                &["repo", "title"],
            ),
            spec("mcp__fs__read_file", "Read a file", &["path"]),
            spec("mcp__fs__write_file", "Write a file", &["path", "content"]),
        ];
        let index = ToolIndex::build(&specs);
        assert_eq!(index.search("create issue", 5)[0], 1);
        assert_eq!(index.search("file path", 5), [2, 3]);
        assert_eq!(index.search("content", 5), [3]);
        assert_eq!(index.search("weather", 5), Vec::<usize>::new());
        assert_eq!(index.search("repository", 1).len(), 1);
        let text = answer(&specs, &[1], "create issue");
        assert!(text.starts_with("1 tool(s) found") && text.contains("mcp__gh__create_issue"));
        assert_eq!(
            query_of(&json!({"query": "x", "limit": 500})),
            ("x".to_owned(), MAX_LIMIT)
        );
    }
}
