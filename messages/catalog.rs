//! Building one catalog generation from a server's `tools/list` entries (SYNC-3, SYNC-7, SYNC-8).
//!
//! Pure: takes the raw JSON entries of every page, returns the definitions or the
//! reason the whole catalog is rejected.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::call::ToolDefinition;
use super::config::Scope;
use super::naming::public_tool_name;
use super::schema::check_supported;

/// Every page of one `tools/list`, as fetched (SYNC-3).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolPages {
    /// Every page's entries, raw.
    pub entries: Vec<Value>,
    /// How long the server says the list stays fresh (`ttlMs`, the
    /// shortest of the pages'; `None` when a page gave none, as every
    /// session-era server).
    pub fresh_for: Option<std::time::Duration>,
}

/// A built catalog: definitions plus the warnings about dropped or degraded entries.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltCatalog {
    /// The definitions, in server order.
    pub tools: Vec<Arc<ToolDefinition>>,
    /// One line per dropped entry or degraded output schema.
    pub warnings: Vec<String>,
}

/// Build a catalog from raw `tools/list` entries.
///
/// - malformed entries (not an object, no string `name`, non-object `inputSchema`)
///   are dropped with a warning (SYNC-7);
/// - a missing `inputSchema` becomes `{"type":"object"}`;
/// - an `outputSchema` outside the supported subset degrades to "any JSON value"
///   (dropped, with every problem in the warning);
/// - `execution.taskSupport == "required"` in the entry
///   marks the tool as refused at call time;
/// - a duplicate raw or public name rejects the whole catalog (SYNC-3);
/// - the server's secret values (`secrets`) are redacted from every string
///   of every entry first (TRUST-2), and an entry whose name holds one is
///   dropped with a warning: a name cannot be shown, and a redacted one
///   would no longer be the server's.
pub fn build_catalog_redacted(
    scope: &Scope,
    server: &str,
    generation: u64,
    mut entries: Vec<Value>,
    secrets: &[String],
) -> Result<BuiltCatalog, CatalogError> {
    let mut warnings = Vec::new();
    if secrets.iter().any(|s| !s.is_empty()) {
        let mut index = 0;
        entries.retain_mut(|entry| {
            index += 1;
            let named = entry.get("name").and_then(Value::as_str).is_some_and(|n| {
                secrets
                    .iter()
                    .any(|s| !s.is_empty() && n.contains(s.as_str()))
            });
            if named {
                warnings.push(format!(
                    "tools/list entry {} dropped: its name holds a secret value of the server",
                    index - 1
                ));
                return false;
            }
            crate::messages::trust::redact_value(entry, secrets);
            true
        });
    }
    let mut built = build_catalog(scope, server, generation, entries)?;
    warnings.append(&mut built.warnings);
    built.warnings = warnings;
    Ok(built)
}

/// Build one generation from raw `tools/list` entries (see
/// [`build_catalog_redacted`], which redacts a server's secret values
/// first; this is that without secrets).
pub fn build_catalog(
    scope: &Scope,
    server: &str,
    generation: u64,
    entries: Vec<Value>,
) -> Result<BuiltCatalog, CatalogError> {
    let mut tools = Vec::with_capacity(entries.len());
    let mut warnings = Vec::new();
    for (index, entry) in entries.into_iter().enumerate() {
        let Value::Object(mut obj) = entry else {
            warnings.push(format!("tools/list entry {index} dropped: not an object"));
            continue;
        };
        // Fields are moved out of the entry, never copied (PERF-1).
        let Some(Value::String(raw_name)) = obj.remove("name") else {
            warnings.push(format!(
                "tools/list entry {index} dropped: no string \"name\""
            ));
            continue;
        };
        if raw_name.is_empty() {
            warnings.push(format!("tools/list entry {index} dropped: empty \"name\""));
            continue;
        }
        let input_schema = match obj.remove("inputSchema") {
            None | Some(Value::Null) => {
                let mut m = Map::new();
                m.insert("type".into(), Value::String("object".into()));
                m
            }
            Some(Value::Object(m)) => m,
            Some(_) => {
                warnings.push(format!(
                    "tool \"{raw_name}\" dropped: inputSchema is not an object"
                ));
                continue;
            }
        };
        let output_schema = match obj.remove("outputSchema") {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => match check_supported(&m) {
                Ok(()) => Some(Arc::new(m)),
                Err(problems) => {
                    warnings.push(format!(
                        "tool \"{raw_name}\": outputSchema outside the supported subset, treated as any JSON value: {}",
                        problems.join("; ")
                    ));
                    None
                }
            },
            Some(_) => {
                warnings.push(format!(
                    "tool \"{raw_name}\": outputSchema is not an object, treated as any JSON value"
                ));
                None
            }
        };
        let public = public_tool_name(server, &raw_name);
        let annotations = obj.remove("annotations").filter(|v| !v.is_null());
        let title = take_string(&mut obj, "title").or_else(|| {
            annotations
                .as_ref()
                .and_then(|a| a.get("title"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        let task_support_required = obj
            .get("execution")
            .and_then(|e| e.get("taskSupport"))
            .and_then(Value::as_str)
            == Some("required");
        tools.push(Arc::new(ToolDefinition {
            name: public,
            scope: scope.clone(),
            server: server.to_owned(),
            description: take_string(&mut obj, "description"),
            raw_name,
            generation,
            title,
            input_schema: Arc::new(input_schema),
            output_schema,
            annotations,
            task_support_required,
        }));
    }
    check_names(&tools)?;
    Ok(BuiltCatalog { tools, warnings })
}

/// A string field moved out of `obj`; any other value stays.
fn take_string(obj: &mut Map<String, Value>, key: &str) -> Option<String> {
    match obj.get(key) {
        Some(Value::String(_)) => match obj.remove(key) {
            Some(Value::String(s)) => Some(s),
            _ => None,
        },
        _ => None,
    }
}

/// SYNC-3: a duplicate raw name, or two raw names with one public name,
/// rejects the catalog; the first clash in server order is reported. Checked
/// over the built definitions, borrowing their names.
fn check_names(tools: &[Arc<ToolDefinition>]) -> Result<(), CatalogError> {
    let mut raw_seen: HashSet<&str> = HashSet::with_capacity(tools.len());
    let mut public_seen: HashMap<&str, &str> = HashMap::with_capacity(tools.len());
    for t in tools {
        if !raw_seen.insert(&t.raw_name) {
            return Err(CatalogError::DuplicateName {
                raw_name: t.raw_name.clone(),
            });
        }
        if let Some(other) = public_seen.insert(&t.name, &t.raw_name) {
            return Err(CatalogError::SamePublicName {
                first: other.to_owned(),
                second: t.raw_name.clone(),
                public: t.name.clone(),
            });
        }
    }
    Ok(())
}

/// Why a whole catalog is rejected (SYNC-3): the previous generation stays.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    /// Two tools share a raw name.
    #[error("duplicate tool name \"{raw_name}\" in one catalog")]
    DuplicateName {
        /// The name.
        raw_name: String,
    },
    /// Two raw names map to one public name.
    #[error("tools \"{first}\" and \"{second}\" map to the same public name \"{public}\"")]
    SamePublicName {
        /// The first tool's raw name.
        first: String,
        /// The second's.
        second: String,
        /// The public name both map to.
        public: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn build(entries: Vec<Value>) -> Result<BuiltCatalog, CatalogError> {
        build_catalog(&Scope::Global, "srv", 3, entries)
    }

    #[test]
    fn a_servers_secret_is_redacted_from_its_entries_and_a_tool_named_with_it_is_dropped() {
        // TRUST-2.
        let secrets = vec!["s3cr3t".to_owned(), String::new()];
        let c = build_catalog_redacted(
            &Scope::Global,
            "srv",
            1,
            vec![
                json!({"name": "get_s3cr3t", "inputSchema": {"type": "object"}}),
                json!({
                    "name": "echo",
                    "title": "Echo s3cr3t",
                    "description": "uses s3cr3t",
                    "inputSchema": {"type": "object", "properties": {"s3cr3t": {"default": "xs3cr3tx"}}}
                }),
            ],
            &secrets,
        )
        .unwrap();
        assert_eq!(c.tools.len(), 1);
        let t = &c.tools[0];
        assert_eq!(t.raw_name, "echo");
        assert_eq!(t.title.as_deref(), Some("Echo [redacted]"));
        assert_eq!(t.description.as_deref(), Some("uses [redacted]"));
        assert_eq!(
            Value::Object((*t.input_schema).clone()),
            json!({"type": "object", "properties": {"[redacted]": {"default": "x[redacted]x"}}})
        );
        assert_eq!(
            c.warnings,
            ["tools/list entry 0 dropped: its name holds a secret value of the server"]
        );
        assert!(!format!("{c:?}").contains("s3cr3t"));
    }

    #[test]
    fn malformed_entries_are_dropped_with_a_warning_not_the_catalog() {
        // SYNC-7
        let c = build(vec![
            json!({"name": "ok"}),
            json!(42),
            json!({"description": "no name"}),
            json!({"name": "bad", "inputSchema": "nope"}),
        ])
        .unwrap();
        assert_eq!(c.tools.len(), 1);
        assert_eq!(c.tools[0].raw_name, "ok");
        assert_eq!(c.tools[0].input_schema.get("type"), Some(&json!("object")));
        assert_eq!(c.warnings.len(), 3, "{:?}", c.warnings);
    }

    #[test]
    fn a_clean_raw_name_equal_to_another_tools_hashed_name_rejects_the_catalog() {
        // SYNC-1 keeps a clean name as is, so a server can name a tool after
        // another tool's hashed public name; SYNC-3 then rejects the catalog
        // whole instead of giving two tools one name.
        let hashed = public_tool_name("srv", "a.b");
        let clean = hashed.strip_prefix("mcp__srv__").unwrap().to_owned();
        assert_eq!(public_tool_name("srv", &clean), hashed);
        assert_eq!(
            build(vec![json!({"name": "a.b"}), json!({"name": clean})]),
            Err(CatalogError::SamePublicName {
                first: "a.b".into(),
                second: clean,
                public: hashed,
            })
        );
    }

    #[test]
    fn duplicate_raw_or_public_names_reject_the_whole_catalog() {
        // SYNC-3
        assert!(build(vec![json!({"name": "a"}), json!({"name": "a"})]).is_err());
        let err = build(vec![json!({"name": "a.b"}), json!({"name": "a b"})]);
        // different raw names, but each is hashed from its own raw name: no clash.
        assert!(err.is_ok());
    }

    #[test]
    fn unsupported_output_schema_degrades_and_task_support_is_read() {
        // SYNC-7
        let c = build(vec![
            json!({"name": "s", "outputSchema": {"type": "object", "properties": {"x": {"type": "number", "minimum": 0}}}}),
            json!({"name": "k", "outputSchema": {"type": "object", "properties": {"x": {"type": "number"}}, "$schema": "https://json-schema.org/draft/2020-12/schema"}}),
            json!({"name": "t", "execution": {"taskSupport": "required"}}),
        ])
        .unwrap();
        assert!(c.tools[0].output_schema.is_none());
        assert!(c.tools[1].output_schema.is_some());
        assert!(c.tools[2].task_support_required);
        assert!(c.warnings[0].contains("minimum"), "{:?}", c.warnings);
        assert_eq!(c.tools[0].name, "mcp__srv__s");
        assert_eq!(c.tools[0].generation, 3);
    }
}

#[cfg(test)]
mod props {
    //! Property tests of public names in a built catalog.

    use super::*;
    use crate::messages::prop_gen::{any_name, config};
    use proptest::prelude::*;
    use serde_json::json;

    proptest! {
        #![proptest_config(config(256))]

        #[test]
        fn sync3_distinct_raw_names_on_one_server_never_share_a_public_name(
            server in any_name(),
            raws in prop::collection::vec(any_name(), 0..12),
        ) {
            // SYNC-1, SYNC-3: a catalog is built with one public name per
            // tool, or rejected whole when two tools would share one.
            let mut seen = HashSet::new();
            let raws: Vec<String> = raws.into_iter().filter(|r| !r.is_empty() && seen.insert(r.clone())).collect();
            let entries = raws.iter().map(|r| json!({"name": r})).collect();
            match build_catalog(&Scope::Global, &server, 1, entries) {
                Ok(c) => {
                    let names: Vec<&str> = c.tools.iter().map(|t| t.raw_name.as_str()).collect();
                    prop_assert_eq!(names, raws.iter().map(String::as_str).collect::<Vec<_>>());
                    let mut publics = HashSet::new();
                    for t in &c.tools {
                        prop_assert_eq!(&t.name, &public_tool_name(&server, &t.raw_name));
                        prop_assert!(publics.insert(t.name.clone()), "{} twice", t.name);
                    }
                }
                Err(CatalogError::SamePublicName { first, second, public }) => {
                    prop_assert_ne!(&first, &second);
                    prop_assert_eq!(&public_tool_name(&server, &first), &public);
                    prop_assert_eq!(&public_tool_name(&server, &second), &public);
                }
                Err(e) => prop_assert!(false, "distinct raw names: {}", e),
            }
        }
    }
}
