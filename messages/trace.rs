//! W3C Trace Context (issue 35; SEP-414 puts it in a request's `_meta`): a
//! `traceparent` that arrives with a call is continued — the call is a span
//! of the same trace, and the backend is sent a `traceparent` naming that
//! span as its parent, with the caller's `tracestate` unchanged.

use std::fmt::Write as _;

/// A trace a call continues: the caller's trace and parent span, and this
/// hop's own span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// The trace id, 32 lowercase hex digits (never all zeros).
    pub trace_id: String,
    /// The caller's span, 16 lowercase hex digits (never all zeros);
    /// empty for a trace that starts here (an exported call that came
    /// with none, feature `otlp`).
    pub parent_id: String,
    /// This hop's span, 16 lowercase hex digits: the backend's parent.
    pub span_id: String,
    /// The trace flags (bit 0: sampled).
    pub flags: u8,
    /// The caller's `tracestate`, passed on unchanged.
    pub state: Option<String>,
}

impl TraceContext {
    /// Continue the trace of `traceparent` (version `00`; a later version's
    /// first four fields are read as the spec says), with `tracestate`;
    /// `None` for a value that is not a valid traceparent (it is then
    /// ignored, as the spec says, and no trace is continued).
    pub fn continue_from(traceparent: &str, tracestate: Option<&str>) -> Option<Self> {
        let t = traceparent.trim();
        let mut parts = t.split('-');
        let (version, trace_id, parent_id, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex = |s: &str, n: usize| {
            s.len() == n
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if !hex(version, 2) || version == "ff" || (version == "00" && parts.next().is_some()) {
            return None;
        }
        if !hex(trace_id, 32) || !hex(parent_id, 16) || !hex(flags, 2) {
            return None;
        }
        if trace_id.bytes().all(|b| b == b'0') || parent_id.bytes().all(|b| b == b'0') {
            return None;
        }
        Some(Self {
            trace_id: trace_id.to_owned(),
            parent_id: parent_id.to_owned(),
            span_id: new_span_id(),
            // The sampled and random bits; unknown ones are not passed on.
            flags: u8::from_str_radix(flags, 16).ok()? & 0x03,
            state: tracestate
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
        })
    }

    /// The `traceparent` the backend is sent: this trace, this hop's span
    /// as the parent.
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-{:02x}", self.trace_id, self.span_id, self.flags)
    }
}

/// A random span id: 8 bytes, not all zero, as 16 lowercase hex digits.
fn new_span_id() -> String {
    let mut bytes: [u8; 8] = rand::random();
    if bytes == [0; 8] {
        bytes[7] = 1;
    }
    let mut s = String::with_capacity(16);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_traceparent_is_continued_with_a_span_of_this_hop() {
        let t = TraceContext::continue_from(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            Some("congo=t61rcWkgMzE"),
        )
        .unwrap();
        assert_eq!(t.trace_id, "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(t.parent_id, "b7ad6b7169203331");
        assert_ne!(t.span_id, t.parent_id);
        assert_eq!(t.state.as_deref(), Some("congo=t61rcWkgMzE"));
        let next = t.traceparent();
        assert_eq!(
            next,
            format!("00-0af7651916cd43dd8448eb211c80319c-{}-01", t.span_id)
        );
        assert!(TraceContext::continue_from(&next, None).is_some());
        // A later version's extra fields are allowed.
        assert!(
            TraceContext::continue_from(
                "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00-extra",
                None
            )
            .is_some()
        );
    }

    #[test]
    fn an_invalid_traceparent_continues_nothing() {
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01",
        ] {
            assert_eq!(TraceContext::continue_from(bad, None), None, "{bad:?}");
        }
    }
}
