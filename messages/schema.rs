//! The supported JSON Schema subset for tool output schemas (SYNC-7) and
//! validation of `structuredContent` against it (CALL-3).
//!
//! # The exact subset
//!
//! A schema is a JSON object; wherever a subschema is expected, the boolean
//! schemas `true` (anything) and `false` (nothing) are accepted too.
//!
//! | keyword | accepted form |
//! |---|---|
//! | `type` | a type name (`object`, `array`, `string`, `number`, `integer`, `boolean`, `null`), or an array of them |
//! | `oneOf`, `anyOf`, `allOf` | array of subschemas |
//! | `properties` | object of subschemas |
//! | `required` | array of strings, each declared in `properties` of the same schema |
//! | `additionalProperties` | boolean, or a subschema the other properties must match |
//! | `items` | one subschema |
//! | `enum` | array of any values |
//! | `const` | any value |
//! | `$defs`, `definitions` | object of subschemas (what `$ref` points at) |
//! | `$ref` | a reference inside the schema: `#`, or a JSON pointer `#/$defs/Name` that resolves |
//! | `description`, `title`, `default`, `examples`, `$schema`, `$id`, `format`, `$comment`, `readOnly`, `writeOnly`, `deprecated` | annotations, ignored |
//!
//! These are what SDK-generated schemas hold (pydantic's `$defs`/`$ref` and
//! `anyOf` for optional fields, zod's `anyOf`). Every other keyword
//! (`minimum`, `pattern`, `not`, …) and every other form (`items` as an
//! array, a `$ref` to another document, …) is unsupported. [`check_supported`] reports every
//! problem, not just the first. Paths are JSON-pointer-like: `/` is the root,
//! children are `/`-joined with `~` escaped as `~0` and `/` as `~1`.

use serde_json::{Map, Value};
use std::fmt;

/// The type names accepted by the `type` keyword.
pub const SUPPORTED_TYPES: [&str; 7] = [
    "object", "array", "string", "number", "integer", "boolean", "null",
];

/// Keywords accepted and ignored as annotations.
pub const ANNOTATIONS: [&str; 11] = [
    "description",
    "title",
    "default",
    "examples",
    "$schema",
    "$id",
    "format",
    "$comment",
    "readOnly",
    "writeOnly",
    "deprecated",
];

/// How many `$ref`s validation follows at one place of the value before it
/// calls the schema a loop (`{"$ref": "#"}` at the root refers to itself
/// forever); moving into a property or an item starts the count again, so
/// a recursive shape (a list whose `next` is a `$ref`) is as deep as its
/// value.
const REF_DEPTH: usize = 64;

/// How deep validation nests (subschemas within subschemas, `$ref`s
/// followed) before it stops: a schema is outside input, and each level is
/// stack. A value read from JSON nests at most 128 deep, and a recursive
/// schema spends about three levels per level of the value.
const MAX_DEPTH: usize = 512;

/// How many subschemas one validation visits at most: `allOf` / `anyOf` /
/// `oneOf` over `$ref`s can branch exponentially, and a server's schema
/// must not wedge the call path.
const MAX_STEPS: usize = 100_000;

/// Whether `pointer` (after `#/`) leads through schema positions only:
/// `$defs/NAME`, `definitions/NAME`, `properties/NAME`, `items`,
/// `additionalProperties`, `allOf|anyOf|oneOf/N`. A `$ref` elsewhere (into
/// an `enum`, a `default`) would point at what [`check_supported`] never
/// checked.
fn schema_pointer(pointer: &str) -> bool {
    let mut segments = pointer.split('/');
    let mut any = false;
    while let Some(keyword) = segments.next() {
        any = true;
        let ok = match keyword {
            "$defs" | "definitions" | "properties" => segments.next().is_some(),
            "allOf" | "anyOf" | "oneOf" => {
                segments.next().is_some_and(|n| n.parse::<usize>().is_ok())
            }
            "items" | "additionalProperties" => true,
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    any
}

/// The subschema a local `$ref` (`#`, `#/$defs/Name`) names in `root`.
fn resolve_ref<'a>(root: &'a Map<String, Value>, reference: &str) -> Option<&'a Value> {
    let mut segments = reference
        .strip_prefix("#/")?
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"));
    let mut at = root.get(&segments.next()?)?;
    for segment in segments {
        at = match at {
            Value::Object(m) => m.get(&segment)?,
            Value::Array(a) => a.get(segment.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(at)
}

/// The path of the root, in schema problems and violations.
const ROOT: &str = "/";

/// Appends one JSON-pointer segment to `path`, escaping `~` and `/`.
fn child(path: &str, segment: &str) -> String {
    let escaped = segment.replace('~', "~0").replace('/', "~1");
    if path == ROOT {
        format!("/{escaped}")
    } else {
        format!("{path}/{escaped}")
    }
}

/// The JSON kind of a value, as used in messages ("object", "null", …).
pub fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// [`kind`] with its article, for sentences ("an object", "a string", "null").
pub fn kind_with_article(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Array(_) | Value::Object(_) => format!("an {}", kind(value)),
        _ => format!("a {}", kind(value)),
    }
}

/// Checks that `schema` stays inside the supported subset (SYNC-7).
///
/// Returns every problem found, recursively, each as `"{path}: {problem}"`,
/// e.g. `/properties/temp: unsupported keyword "minimum"`.
pub fn check_supported(schema: &Map<String, Value>) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    check_object(schema, schema, ROOT, &mut problems);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// Checks one subschema position: an object schema or a boolean schema.
fn check_subschema(
    root: &Map<String, Value>,
    value: &Value,
    path: &str,
    problems: &mut Vec<String>,
) {
    match value {
        Value::Object(map) => check_object(root, map, path, problems),
        Value::Bool(_) => {}
        other => problems.push(format!(
            "{path}: a schema must be an object or a boolean, not {}",
            kind(other)
        )),
    }
}

/// Checks one object schema.
fn check_object(
    root: &Map<String, Value>,
    schema: &Map<String, Value>,
    path: &str,
    problems: &mut Vec<String>,
) {
    for (keyword, value) in schema {
        match keyword.as_str() {
            "type" => {
                let names: Vec<&Value> = match value {
                    Value::Array(names) if !names.is_empty() => names.iter().collect(),
                    Value::Array(_) => {
                        problems.push(format!("{path}: \"type\" is an empty array"));
                        Vec::new()
                    }
                    other => vec![other],
                };
                for name in names {
                    match name {
                        Value::String(t) if SUPPORTED_TYPES.contains(&t.as_str()) => {}
                        Value::String(t) => {
                            problems.push(format!("{path}: unsupported type {t:?}"));
                        }
                        other => problems.push(format!(
                            "{path}: \"type\" must name types as strings, not {}",
                            kind(other)
                        )),
                    }
                }
            }
            k @ ("oneOf" | "anyOf" | "allOf") => match value {
                Value::Array(branches) if branches.is_empty() => {
                    problems.push(format!("{path}: \"{k}\" is an empty array"));
                }
                Value::Array(branches) => {
                    let here = child(path, k);
                    for (i, branch) in branches.iter().enumerate() {
                        check_subschema(root, branch, &child(&here, &i.to_string()), problems);
                    }
                }
                other => problems.push(format!(
                    "{path}: \"{k}\" must be an array of schemas, not {}",
                    kind(other)
                )),
            },
            k @ ("$defs" | "definitions") => match value {
                Value::Object(defs) => {
                    let here = child(path, k);
                    for (name, sub) in defs {
                        check_subschema(root, sub, &child(&here, name), problems);
                    }
                }
                other => problems.push(format!(
                    "{path}: \"{k}\" must be an object of schemas, not {}",
                    kind(other)
                )),
            },
            "$ref" => match value {
                Value::String(r) if r == "#" => {}
                Value::String(r) if r.starts_with("#/") => {
                    let at_schema = r.strip_prefix("#/").is_some_and(schema_pointer);
                    if !at_schema
                        || !resolve_ref(root, r).is_some_and(|t| t.is_object() || t.is_boolean())
                    {
                        problems.push(format!(
                            "{path}: \"$ref\" {r:?} names no schema in this document"
                        ));
                    }
                }
                Value::String(r) => problems.push(format!(
                    "{path}: unsupported \"$ref\" {r:?} (only references inside the schema, `#/…`)"
                )),
                other => problems.push(format!(
                    "{path}: \"$ref\" must be a string, not {}",
                    kind(other)
                )),
            },
            "properties" => match value {
                Value::Object(props) => {
                    let here = child(path, "properties");
                    for (name, sub) in props {
                        check_subschema(root, sub, &child(&here, name), problems);
                    }
                }
                other => problems.push(format!(
                    "{path}: \"properties\" must be an object of schemas, not {}",
                    kind(other)
                )),
            },
            "required" => match value {
                Value::Array(names) => {
                    let declared = schema.get("properties").and_then(Value::as_object);
                    for name in names {
                        match name {
                            Value::String(n) => {
                                if !declared.is_some_and(|d| d.contains_key(n)) {
                                    problems.push(format!(
                                        "{path}: required property {n:?} is not declared in \"properties\""
                                    ));
                                }
                            }
                            other => problems.push(format!(
                                "{path}: \"required\" must list strings, found {}",
                                kind(other)
                            )),
                        }
                    }
                }
                other => problems.push(format!(
                    "{path}: \"required\" must be an array of strings, not {}",
                    kind(other)
                )),
            },
            "additionalProperties" => match value {
                Value::Bool(_) => {}
                Value::Object(_) => {
                    check_subschema(root, value, &child(path, "additionalProperties"), problems);
                }
                other => problems.push(format!(
                    "{path}: \"additionalProperties\" must be a boolean or a schema, not {}",
                    kind(other)
                )),
            },
            "items" => match value {
                Value::Object(_) | Value::Bool(_) => {
                    check_subschema(root, value, &child(path, "items"), problems);
                }
                other => problems.push(format!(
                    "{path}: \"items\" must be one schema, not {}",
                    kind(other)
                )),
            },
            "enum" => {
                if !value.is_array() {
                    problems.push(format!(
                        "{path}: \"enum\" must be an array, not {}",
                        kind(value)
                    ));
                }
            }
            "const" => {}
            k if ANNOTATIONS.contains(&k) => {}
            other => problems.push(format!("{path}: unsupported keyword {other:?}")),
        }
    }
}

/// One way a value fails its schema (CALL-3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Where in the value: `/` for the root, otherwise like `/items/0/name`.
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Validates `value` against `schema` and returns every violation (empty
/// means valid).
///
/// Meant for schemas that passed [`check_supported`]; keywords outside the
/// subset, and malformed forms of supported ones, are ignored. Every keyword
/// applies independently (a type mismatch does not stop `enum` from being
/// checked). `enum` and `const` compare as JSON: numbers by value, so `1`
/// equals `1.0`.
pub fn validate(value: &Value, schema: &Map<String, Value>) -> Vec<Violation> {
    let mut out = Vec::new();
    let work = Work::default();
    let at = At {
        root: schema,
        refs: 0,
        depth: 0,
        work: &work,
    };
    validate_object(at, value, schema, ROOT, &mut out);
    if work.over.get() {
        out.push(violation(
            ROOT,
            format!(
                "the output schema is too complex to check (over {MAX_STEPS} steps or {MAX_DEPTH} levels)"
            ),
        ));
    }
    out
}

/// What one validation has spent, shared by all its branches.
#[derive(Default)]
struct Work {
    steps: std::cell::Cell<usize>,
    /// A limit was reached: the validation stopped short.
    over: std::cell::Cell<bool>,
}

/// What validation carries down: the schema `$ref`s resolve in, how many
/// it followed at this place of the value, how deep it is, and the work.
#[derive(Clone, Copy)]
struct At<'a> {
    root: &'a Map<String, Value>,
    refs: usize,
    depth: usize,
    work: &'a Work,
}

impl<'a> At<'a> {
    /// One level deeper at the same place of the value.
    fn nested(self) -> Self {
        Self {
            depth: self.depth + 1,
            ..self
        }
    }

    /// One level deeper, into a property or an item.
    fn child(self) -> Self {
        Self {
            refs: 0,
            depth: self.depth + 1,
            ..self
        }
    }
}

/// Validates against a subschema position (object or boolean schema).
fn validate_subschema(
    at: At<'_>,
    value: &Value,
    schema: &Value,
    path: &str,
    out: &mut Vec<Violation>,
) {
    match schema {
        Value::Object(map) => validate_object(at, value, map, path, out),
        Value::Bool(false) => out.push(violation(path, "no value is allowed here".to_string())),
        _ => {}
    }
}

/// Builds a violation.
fn violation(path: &str, message: String) -> Violation {
    Violation {
        path: path.to_string(),
        message,
    }
}

/// Whether `value` is of the named JSON Schema type.
fn has_type(value: &Value, type_name: &str) -> bool {
    match type_name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => match value {
            Value::Number(n) => {
                n.is_i64()
                    || n.is_u64()
                    || n.as_f64()
                        .is_some_and(|f| f.is_finite() && f.fract() == 0.0)
            }
            _ => false,
        },
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        _ => true,
    }
}

/// JSON equality: like `==`, but numbers compare by value (`1` equals `1.0`).
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                x == y
            } else if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                x == y
            } else if x.is_f64() || y.is_f64() {
                x.as_f64() == y.as_f64()
            } else {
                // One negative i64 and one u64 above i64::MAX.
                false
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

/// Validates against one object schema.
fn validate_object(
    at: At<'_>,
    value: &Value,
    schema: &Map<String, Value>,
    path: &str,
    out: &mut Vec<Violation>,
) {
    let work = at.work;
    work.steps.set(work.steps.get() + 1);
    if work.over.get() || work.steps.get() > MAX_STEPS || at.depth > MAX_DEPTH {
        work.over.set(true);
        return;
    }
    match schema.get("type") {
        Some(Value::String(t)) if !has_type(value, t) => {
            out.push(violation(
                path,
                format!("expected {t}, got {}", kind(value)),
            ));
        }
        Some(Value::Array(names)) => {
            let names: Vec<&str> = names.iter().filter_map(Value::as_str).collect();
            if !names.iter().any(|t| has_type(value, t)) {
                out.push(violation(
                    path,
                    format!("expected {}, got {}", names.join(" or "), kind(value)),
                ));
            }
        }
        _ => {}
    }
    if let Some(Value::String(reference)) = schema.get("$ref") {
        if at.refs >= REF_DEPTH {
            out.push(violation(
                path,
                format!("the schema's \"$ref\" {reference:?} loops (followed {REF_DEPTH} times)"),
            ));
        } else if reference == "#" {
            let deeper = At {
                refs: at.refs + 1,
                ..at.nested()
            };
            validate_object(deeper, value, at.root, path, out);
        } else if let Some(target) = resolve_ref(at.root, reference) {
            let deeper = At {
                refs: at.refs + 1,
                ..at.nested()
            };
            validate_subschema(deeper, value, target, path, out);
        }
    }
    let matches = |branch: &Value| {
        let mut sub = Vec::new();
        validate_subschema(at.nested(), value, branch, path, &mut sub);
        sub
    };
    if let Some(Value::Array(branches)) = schema.get("anyOf")
        && !branches.is_empty()
        && !branches.iter().any(|b| matches(b).is_empty())
    {
        out.push(violation(
            path,
            format!("matched none of {} alternatives (anyOf)", branches.len()),
        ));
    }
    if let Some(Value::Array(branches)) = schema.get("allOf") {
        for branch in branches {
            out.extend(matches(branch));
        }
    }
    if let Some(Value::Array(branches)) = schema.get("oneOf") {
        let matched = branches
            .iter()
            .filter(|branch| matches(branch).is_empty())
            .count();
        let n = branches.len();
        if matched == 0 {
            out.push(violation(path, format!("matched none of {n} alternatives")));
        } else if matched > 1 {
            out.push(violation(
                path,
                format!("matched {matched} of {n} alternatives, exactly one required"),
            ));
        }
    }
    if let Some(Value::Array(allowed)) = schema.get("enum")
        && !allowed.iter().any(|a| json_equal(a, value))
    {
        out.push(violation(
            path,
            format!("value is not one of the {} allowed values", allowed.len()),
        ));
    }
    if let Some(expected) = schema.get("const")
        && !json_equal(expected, value)
    {
        out.push(violation(path, format!("value must equal {expected}")));
    }
    if let Value::Object(obj) = value {
        let props = schema.get("properties").and_then(Value::as_object);
        if let Some(Value::Array(required)) = schema.get("required") {
            for name in required.iter().filter_map(Value::as_str) {
                if !obj.contains_key(name) {
                    out.push(violation(
                        path,
                        format!("missing required property {name:?}"),
                    ));
                }
            }
        }
        for (key, field) in obj {
            match (
                props.and_then(|p| p.get(key)),
                schema.get("additionalProperties"),
            ) {
                (Some(sub), _) => {
                    validate_subschema(at.child(), field, sub, &child(path, key), out);
                }
                (None, Some(Value::Bool(false))) => out.push(violation(
                    path,
                    format!("unexpected property {key:?} (additionalProperties is false)"),
                )),
                (None, Some(extra @ Value::Object(_))) => {
                    validate_subschema(at.child(), field, extra, &child(path, key), out);
                }
                (None, _) => {}
            }
        }
    }
    if let (Value::Array(elements), Some(items)) = (value, schema.get("items")) {
        for (i, element) in elements.iter().enumerate() {
            validate_subschema(
                at.child(),
                element,
                items,
                &child(path, &i.to_string()),
                out,
            );
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod props;
