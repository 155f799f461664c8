//! OpenTelemetry export of the call spans (feature `otlp`, issue 35): the
//! `tracing` ecosystem's layer (`tracing-opentelemetry`) with the OTLP/HTTP
//! exporter, configured by the standard `OTEL_EXPORTER_OTLP_*` variables.
//!
//! A call that continues a W3C trace ([`TraceContext`]) is a `tracing`
//! span; with the layer installed, that span is exported as a child of the
//! caller's span in the same trace, and the span id the backend is sent as
//! its parent is the exported span's, so the three hops join up in the
//! tracing backend. A call that came with no trace starts one: its span is
//! a root, and the backend is sent it as its parent all the same.

use std::time::Duration;

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::messages::trace::TraceContext;

/// How long [`OtlpExport::shutdown`] waits for the last spans to go out.
const FLUSH_DEADLINE: Duration = Duration::from_secs(5);

/// Make `span` (the call's) a child of the caller's span in the
/// OpenTelemetry context, and take its exported span id as this hop's
/// (what the backend is sent as its parent). Without the layer installed,
/// `trace` keeps its own id.
pub(crate) fn continue_in(span: &tracing::Span, trace: &mut TraceContext) {
    let (Ok(trace_id), Ok(parent_id)) = (
        TraceId::from_hex(&trace.trace_id),
        SpanId::from_hex(&trace.parent_id),
    ) else {
        return;
    };
    let state = trace
        .state
        .as_deref()
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    let remote = SpanContext::new(
        trace_id,
        parent_id,
        TraceFlags::new(trace.flags & 0x01),
        true,
        state,
    );
    let parent = opentelemetry::Context::new().with_remote_span_context(remote);
    if span.set_parent(parent).is_err() {
        return;
    }
    let own = span.context();
    let own = own.span().span_context().clone();
    if own.is_valid() && own.trace_id() == trace_id {
        trace.span_id = own.span_id().to_string();
        span.record("span_id", trace.span_id.as_str());
    }
}

/// A trace that starts at `span` (a call that came with none): the
/// exported span's trace and id, so the backend is sent it as its parent;
/// None when the span is not exported (no layer installed).
pub(crate) fn start_in(span: &tracing::Span) -> Option<TraceContext> {
    if span.is_disabled() {
        return None;
    }
    let cx = span.context();
    let own = cx.span().span_context().clone();
    if !own.is_valid() {
        return None;
    }
    let trace = TraceContext {
        trace_id: own.trace_id().to_string(),
        parent_id: String::new(),
        span_id: own.span_id().to_string(),
        flags: own.trace_flags().to_u8() & 0x01,
        state: None,
    };
    span.record("trace_id", trace.trace_id.as_str());
    span.record("span_id", trace.span_id.as_str());
    Some(trace)
}

/// An OTLP/HTTP span exporter and its batching provider, set up from the
/// environment: `OTEL_EXPORTER_OTLP_ENDPOINT` (or `…_TRACES_ENDPOINT`),
/// `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`, the default, or
/// `http/json`), `…_HEADERS`, `…_TIMEOUT`. Build it outside an async
/// context (its HTTP client is a blocking one, run on the batch thread),
/// and [`shutdown`](Self::shutdown) it there too.
pub struct OtlpExport {
    provider: SdkTracerProvider,
}

impl std::fmt::Debug for OtlpExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OtlpExport")
    }
}

impl OtlpExport {
    /// The exporter the environment asks for, as `service` (the
    /// `service.name` resource): `None` when no OTLP endpoint is set;
    /// an error naming what is wrong with the settings.
    pub fn from_env(service: &str) -> Result<Option<Self>, String> {
        let set = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
        if !set("OTEL_EXPORTER_OTLP_ENDPOINT") && !set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            return Ok(None);
        }
        use opentelemetry_otlp::WithExportConfig as _;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("the OTLP exporter (OTEL_EXPORTER_OTLP_*): {e}"))?;
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name(service.to_owned())
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        Ok(Some(Self { provider }))
    }

    /// The `tracing` layer that exports the call spans through this
    /// exporter: `mcpvisor.call` and its `mcpvisor.policy` and
    /// `mcpvisor.backend` children, at any level; nothing else (not the
    /// actors' per-message spans, nor log events).
    pub fn layer<S>(&self) -> impl tracing_subscriber::Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    {
        use tracing_subscriber::Layer as _;
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("mcpvisor"))
            .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                meta.is_span() && meta.name().starts_with("mcpvisor.")
            }))
    }

    /// Send the spans still batched and stop (at most 5 s): the error says
    /// why some may not have gone.
    pub fn shutdown(self) -> Result<(), String> {
        self.provider
            .shutdown_with_timeout(FLUSH_DEADLINE)
            .map_err(|e| format!("the OTLP exporter's last spans: {e}"))
    }
}
