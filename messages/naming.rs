//! Names: public tool names (SYNC-1), server-name validation (CONN-2) and
//! slugs derived from display names (SYNC-2).
//!
//! Everything here is pure: no I/O, no clock, no randomness of its own (the
//! random slug suffix is supplied by the caller).

use sha2::{Digest, Sha256};

/// Longest public tool name, in UTF-16 code units (SYNC-1).
pub const PUBLIC_NAME_MAX: usize = 64;

/// How many characters of the sanitised name are kept before the hash suffix
/// when a public name has to be hashed (SYNC-1).
const HASHED_PREFIX_LEN: usize = 51;

/// How many lowercase hex characters of the SHA-256 digest are appended (SYNC-1).
const HASH_HEX_LEN: usize = 12;

/// Longest valid `server_name` (CONN-2).
pub const SERVER_NAME_MAX: usize = 32;

/// Longest slug derived from a display name, before any clash suffix (SYNC-2).
pub const SLUG_MAX: usize = 24;

/// Slug used when a display name yields no letters or digits at all (SYNC-2).
pub const EMPTY_SLUG: &str = "server";

/// Whether `c` may appear in a public tool name or a `server_name` as is.
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Computes the public tool name for the pair (`server`, `raw`) exactly as
/// SYNC-1 prescribes, so names are stable across hosts.
///
/// `joined = "mcp__" + server + "__" + raw`; every character outside
/// `[A-Za-z0-9_-]` becomes one `_` per UTF-16 code unit. If nothing was
/// replaced and `joined` is at most 64 UTF-16 units it is returned as is;
/// otherwise the result is the first 51 characters of the replaced string,
/// `_`, and the first 12 lowercase hex characters of SHA-256 over the UTF-8
/// bytes of `server + "\0" + raw`. The result always matches
/// `^[A-Za-z0-9_-]{1,64}$`.
pub fn public_tool_name(server: &str, raw: &str) -> String {
    let joined = format!("mcp__{server}__{raw}");
    let mut replaced = String::with_capacity(joined.len());
    let mut any_replaced = false;
    for c in joined.chars() {
        if is_name_char(c) {
            replaced.push(c);
        } else {
            any_replaced = true;
            for _ in 0..c.len_utf16() {
                replaced.push('_');
            }
        }
    }
    // After replacement the string is pure ASCII: bytes, chars and UTF-16
    // units coincide, so `len()` and byte slicing are exact.
    if !any_replaced && replaced.len() <= PUBLIC_NAME_MAX {
        return replaced;
    }
    let prefix_len = replaced.len().min(HASHED_PREFIX_LEN);
    let mut hasher = Sha256::new();
    hasher.update(server.as_bytes());
    hasher.update([0u8]);
    hasher.update(raw.as_bytes());
    let digest = hasher.finalize();
    let mut out = String::with_capacity(prefix_len + 1 + HASH_HEX_LEN);
    out.push_str(replaced.get(..prefix_len).unwrap_or(&replaced));
    out.push('_');
    out.push_str(&hex(&digest[..HASH_HEX_LEN / 2]));
    out
}

/// The candidate closest to `name` by edit distance, when it is close
/// enough to be a typo: at most 2 edits, or a quarter of the name's length
/// for long names (did-you-mean).
pub fn closest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (name.chars().count() / 4).max(2);
    candidates
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// Lowercase hex of `bytes` (digests in names, hashes and file names).
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// A `server_name` outside CONN-2's `[A-Za-z0-9_-]{1,32}`. Its text names
/// the field, quotes the value and says what is allowed, e.g.
/// `server_name "my server" is invalid: use 1 to 32 characters from A-Z a-z 0-9 _ -`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "server_name {name:?} is invalid: use 1 to {SERVER_NAME_MAX} characters from A-Z a-z 0-9 _ -"
)]
pub struct InvalidServerName {
    /// The name as given.
    pub name: String,
}

/// Checks a configured `server_name` against CONN-2: `[A-Za-z0-9_-]{1,32}`.
pub fn validate_server_name(name: &str) -> Result<(), InvalidServerName> {
    let len = name.chars().count();
    if (1..=SERVER_NAME_MAX).contains(&len) && name.chars().all(is_name_char) {
        Ok(())
    } else {
        Err(InvalidServerName {
            name: name.to_owned(),
        })
    }
}

/// Derives a `server_name` from a display name (SYNC-2).
///
/// Lowercase; ASCII letters and digits kept; every run of other characters
/// (including non-ASCII letters) folded to one `-`; leading and trailing `-`
/// trimmed; cut to at most 24 characters (trailing `-` trimmed again); empty
/// becomes `server`. If `is_taken(slug)`, the first of `slug-2` … `slug-99`
/// not taken is used, else `slug-` + the output of `random_hex8`, which is
/// called at most once and not checked against `is_taken`. Its output is
/// reduced to lowercase hex digits and cut to 8 (`0` if nothing is left).
/// Because a 24-character base plus `-` and 8 hex digits would be 33 long,
/// the base is cut (and trailing `-` trimmed) so the result always fits
/// the server-name limit (32 characters) and is a valid `server_name`.
pub fn derive_slug(
    display_name: &str,
    is_taken: impl Fn(&str) -> bool,
    random_hex8: impl FnOnce() -> String,
) -> String {
    let base = slug_base(display_name);
    if !is_taken(&base) {
        return base;
    }
    for n in 2..=99u32 {
        let candidate = format!("{base}-{n}");
        if !is_taken(&candidate) {
            return candidate;
        }
    }
    let suffix: String = random_hex8()
        .chars()
        .filter(char::is_ascii_hexdigit)
        .map(|c| c.to_ascii_lowercase())
        .take(8)
        .collect();
    let suffix = if suffix.is_empty() {
        "0".to_string()
    } else {
        suffix
    };
    // base ≤ 24 ASCII chars, "-" + suffix ≤ 9: trim the base so the whole
    // stays within SERVER_NAME_MAX.
    let room = SERVER_NAME_MAX - 1 - suffix.len();
    let cut = base.get(..base.len().min(room)).unwrap_or(&base);
    let cut = cut.trim_end_matches('-');
    format!("{cut}-{suffix}")
}

/// The clash-free part of [`derive_slug`]: folding, trimming and cutting.
fn slug_base(display_name: &str) -> String {
    let mut slug = String::with_capacity(display_name.len());
    let mut pending_dash = false;
    for c in display_name.chars() {
        if c.is_ascii_alphanumeric() {
            if pending_dash && !slug.is_empty() {
                slug.push('-');
            }
            pending_dash = false;
            slug.push(c.to_ascii_lowercase());
        } else {
            pending_dash = true;
        }
    }
    // `slug` is ASCII, so byte slicing is character slicing.
    let cut = slug.get(..slug.len().min(SLUG_MAX)).unwrap_or(&slug);
    let cut = cut.trim_end_matches('-');
    if cut.is_empty() {
        EMPTY_SLUG.to_string()
    } else {
        cut.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_finds_the_closest_name_and_a_stranger_finds_none() {
        let names = ["mcp__everything__echo", "mcp__everything__get-sum"];
        assert_eq!(
            closest("mcp__everything__ecko", names.iter().copied()),
            Some("mcp__everything__echo")
        );
        assert_eq!(closest("mcp__other__thing", names.iter().copied()), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    fn is_valid_public(name: &str) -> bool {
        !name.is_empty() && name.len() <= PUBLIC_NAME_MAX && name.chars().all(is_name_char)
    }

    // SYNC-1: the spec examples must hold exactly.
    #[test]
    fn a_dotted_raw_name_is_replaced_and_hashed() {
        assert_eq!(
            public_tool_name("srv", "admin.reset"),
            "mcp__srv__admin_reset_3b185f786768"
        );
    }

    // SYNC-1
    #[test]
    fn a_clean_short_name_is_kept_as_joined() {
        assert_eq!(
            public_tool_name("srv", "admin_reset"),
            "mcp__srv__admin_reset"
        );
    }

    // SYNC-1
    #[test]
    fn a_space_is_replaced_and_the_name_hashed() {
        assert_eq!(
            public_tool_name("fs", "read file"),
            "mcp__fs__read_file_fe5680de441b"
        );
    }

    // SYNC-1
    #[test]
    fn a_too_long_name_is_cut_to_51_and_hashed() {
        let raw = "a".repeat(55);
        let expected = format!("mcp__srv__{}_cae0c391e7b4", "a".repeat(41));
        assert_eq!(public_tool_name("srv", &raw), expected);
    }

    // SYNC-1: a non-BMP character is two UTF-16 units, hence two underscores.
    #[test]
    fn a_character_outside_the_bmp_becomes_two_underscores() {
        assert_eq!(public_tool_name("srv", "😀"), "mcp__srv_____2ab126ff09c4");
    }

    // SYNC-1
    #[test]
    fn a_clean_name_of_exactly_64_is_kept() {
        // "mcp__srv__" is 10 long.
        let raw = "b".repeat(54);
        let name = public_tool_name("srv", &raw);
        assert_eq!(name, format!("mcp__srv__{raw}"));
        assert_eq!(name.len(), 64);
    }

    // SYNC-1
    #[test]
    fn a_clean_name_of_65_is_hashed() {
        let raw = "b".repeat(55);
        let name = public_tool_name("srv", &raw);
        assert_eq!(name.len(), 64);
        assert!(name.starts_with(&format!("mcp__srv__{}_", "b".repeat(41))));
        assert_ne!(name, format!("mcp__srv__{raw}"));
    }

    // SYNC-1: whatever the input, the result is a valid public name.
    #[test]
    fn every_public_name_is_at_most_64_and_uses_the_safe_alphabet() {
        let long = "x".repeat(300);
        let emoji = "😀".repeat(40);
        let cases: [(&str, &str); 8] = [
            ("", ""),
            ("srv", ""),
            ("srv", "é"),
            ("s p a c e", "t/o/o/l"),
            ("srv", &long),
            (&long, "t"),
            ("srv", &emoji),
            ("ünï", "çødé\u{0}\n"),
        ];
        for (server, raw) in cases {
            let name = public_tool_name(server, raw);
            assert!(is_valid_public(&name), "{server:?} {raw:?} -> {name:?}");
        }
    }

    // SYNC-1: distinct pairs that sanitise alike still get distinct names.
    #[test]
    fn pairs_that_sanitise_alike_get_distinct_names() {
        assert_ne!(
            public_tool_name("srv", "a.b"),
            public_tool_name("srv", "a b")
        );
        assert_ne!(
            public_tool_name("a_b", "c.d"),
            public_tool_name("a", "b_c.d")
        );
    }

    // CONN-2
    #[test]
    fn valid_server_names_are_accepted() {
        for name in ["a", "my-server_01", "ABC", &"z".repeat(32)] {
            assert_eq!(validate_server_name(name), Ok(()), "{name}");
        }
    }

    // CONN-2: the error names the field, quotes the value and says what is allowed.
    #[test]
    fn an_invalid_server_name_gets_an_error_naming_the_field() {
        assert_eq!(
            validate_server_name("my server").map_err(|e| e.to_string()),
            Err(
                "server_name \"my server\" is invalid: use 1 to 32 characters from A-Z a-z 0-9 _ -"
                    .to_string()
            )
        );
    }

    // CONN-2
    #[test]
    fn empty_too_long_and_non_ascii_server_names_are_rejected() {
        for name in ["", &"z".repeat(33), "é", "a.b", "a/b"] {
            let err = validate_server_name(name);
            assert!(err.is_err(), "{name:?}");
            let err = err.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.starts_with("server_name "), "{err}");
        }
    }

    fn never_taken(_: &str) -> bool {
        false
    }

    fn no_random() -> String {
        panic!("random suffix must not be needed")
    }

    // SYNC-2
    #[test]
    fn a_display_name_is_lowercased_and_punctuation_folded() {
        assert_eq!(derive_slug("My Files!", never_taken, no_random), "my-files");
    }

    // SYNC-2
    #[test]
    fn a_display_name_without_letters_or_digits_becomes_server() {
        assert_eq!(derive_slug("  ---  ", never_taken, no_random), "server");
        assert_eq!(derive_slug("", never_taken, no_random), "server");
        assert_eq!(derive_slug("日本語", never_taken, no_random), "server");
    }

    // SYNC-2: non-ASCII letters count as "other characters".
    #[test]
    fn non_ascii_letters_fold_into_dashes() {
        assert_eq!(
            derive_slug("Ünïcode Sérver", never_taken, no_random),
            "n-code-s-rver"
        );
    }

    // SYNC-2
    #[test]
    fn a_long_display_name_is_cut_to_24_without_a_trailing_dash() {
        let slug = derive_slug("The Quick Brown Fox Jumps Over", never_taken, no_random);
        assert_eq!(slug, "the-quick-brown-fox-jump");
        assert_eq!(slug.len(), 24);
        // Cut falls right after a dash: "abcdefghijklmnopqrstuvw-x" -> 23 chars.
        let slug = derive_slug("abcdefghijklmnopqrstuvw x", never_taken, no_random);
        assert_eq!(slug, "abcdefghijklmnopqrstuvw");
    }

    // SYNC-2
    #[test]
    fn a_clash_takes_the_first_free_numeric_suffix() {
        let taken = ["my-files", "my-files-2"];
        let slug = derive_slug("My Files", |s| taken.contains(&s), no_random);
        assert_eq!(slug, "my-files-3");
    }

    // SYNC-2
    #[test]
    fn suffix_99_is_the_last_numeric_one() {
        let slug = derive_slug(
            "My Files",
            |s| s != "my-files-99" && s.starts_with("my-files"),
            no_random,
        );
        assert_eq!(slug, "my-files-99");
    }

    // SYNC-2
    #[test]
    fn when_all_numeric_suffixes_are_taken_a_random_one_is_used() {
        let slug = derive_slug("My Files", |_| true, || "deadbeef".to_string());
        assert_eq!(slug, "my-files-deadbeef");
    }

    // SYNC-2 + CONN-2: a derived slug is always a valid server_name.
    #[test]
    fn every_derived_slug_is_a_valid_server_name() {
        let long = "Z".repeat(100);
        for name in ["My Files!", "", &long, "a b c d e f g h i j k l m n o p"] {
            for random in ["deadbeef", "DEADBEEF00", "zz", ""] {
                let free = derive_slug(name, never_taken, || random.to_string());
                let numbered = derive_slug(name, |s| !s.ends_with("-7"), || random.to_string());
                let randomised = derive_slug(name, |_| true, || random.to_string());
                for slug in [free, numbered, randomised] {
                    assert_eq!(validate_server_name(&slug), Ok(()), "{slug}");
                    assert!(slug.len() <= SERVER_NAME_MAX);
                }
            }
        }
        let randomised = derive_slug(&long, |_| true, || "deadbeef".to_string());
        assert_eq!(randomised, format!("{}-deadbeef", "z".repeat(23)));
    }
}

#[cfg(test)]
mod props {
    //! Property tests of public names and slugs.

    use super::*;
    use crate::messages::prop_gen::{any_name, config};
    use proptest::prelude::*;

    fn is_valid_public(name: &str) -> bool {
        let re = regex::Regex::new("^[A-Za-z0-9_-]{1,64}$").unwrap();
        re.is_match(name)
    }

    proptest! {
        #![proptest_config(config(512))]

        #[test]
        fn sync1_every_public_name_is_safe_short_and_deterministic(server in any_name(), raw in any_name()) {
            // SYNC-1: `^[A-Za-z0-9_-]{1,64}$`, the same every time.
            let name = public_tool_name(&server, &raw);
            prop_assert!(is_valid_public(&name), "{:?}", name);
            prop_assert_eq!(&public_tool_name(&server, &raw), &name);
            let joined = format!("mcp__{server}__{raw}");
            let clean = joined.chars().all(is_name_char) && joined.len() <= PUBLIC_NAME_MAX;
            if clean {
                prop_assert_eq!(name, joined);
            } else {
                // The first 51 characters of the replaced string, `_`, 12
                // lowercase hex characters.
                let replaced: String = joined
                    .chars()
                    .flat_map(|c| {
                        let n = if is_name_char(c) { 0 } else { c.len_utf16() };
                        std::iter::repeat_n('_', n).chain(is_name_char(c).then_some(c))
                    })
                    .collect();
                let prefix = &replaced[..replaced.len().min(HASHED_PREFIX_LEN)];
                prop_assert_eq!(&name[..prefix.len()], prefix);
                let suffix = &name[prefix.len()..];
                prop_assert_eq!(suffix.len(), 1 + HASH_HEX_LEN);
                prop_assert!(suffix.starts_with('_'));
                prop_assert!(suffix[1..].chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)));
            }
        }

        #[test]
        fn sync1_hashed_names_of_distinct_tools_differ(
            server in any_name(),
            a in any_name(),
            b in any_name(),
        ) {
            // SYNC-1: a hashed name carries a hash of the raw pair, so two
            // tools whose names had to be hashed never share one.
            prop_assume!(a != b);
            let (pa, pb) = (public_tool_name(&server, &a), public_tool_name(&server, &b));
            let hashed = |raw: &str, public: &str| public != format!("mcp__{server}__{raw}");
            if hashed(&a, &pa) && hashed(&b, &pb) {
                prop_assert_ne!(pa, pb);
            }
        }

        #[test]
        fn sync2_slugs_are_non_empty_lowercase_dashed_and_within_24(display in any_name()) {
            // SYNC-2: lowercase ASCII letters and digits, single inner
            // dashes, at most 24, `server` when nothing is left.
            let slug = slug_base(&display);
            prop_assert!(!slug.is_empty() && slug.len() <= SLUG_MAX, "{:?}", slug);
            prop_assert!(slug.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
            prop_assert!(!slug.starts_with('-') && !slug.ends_with('-') && !slug.contains("--"));
            if !display.chars().any(|c| c.is_ascii_alphanumeric()) {
                prop_assert_eq!(slug.as_str(), EMPTY_SLUG);
            }
            prop_assert_eq!(slug_base(&display), slug);
        }

        #[test]
        fn sync2_a_derived_slug_is_always_a_free_valid_server_name(
            display in any_name(),
            taken in prop::collection::btree_set(0u32..120, 0..120),
            all_taken in prop::bool::weighted(0.2),
            base_taken in any::<bool>(),
            random in any::<String>(),
        ) {
            let taken: std::collections::BTreeSet<u32> =
                if all_taken { (0..120).collect() } else { taken };
            // SYNC-2 + CONN-2: whatever is taken and whatever the random
            // source says, the slug is a valid server_name, and a free one
            // while a numeric suffix is left.
            let base = slug_base(&display);
            let is_taken = |s: &str| {
                if s == base {
                    return base_taken;
                }
                s.strip_prefix(&format!("{base}-"))
                    .and_then(|n| n.parse::<u32>().ok())
                    .is_some_and(|n| taken.contains(&n))
            };
            let slug = derive_slug(&display, is_taken, || random.clone());
            prop_assert_eq!(validate_server_name(&slug), Ok(()), "{:?}", slug);
            let numeric_left = !base_taken || (2..=99).any(|n| !taken.contains(&n));
            if numeric_left {
                prop_assert!(!is_taken(&slug), "{:?} is taken", slug);
            }
            if !base_taken {
                prop_assert_eq!(slug, base);
            }
        }
    }
}
