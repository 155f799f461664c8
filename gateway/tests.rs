use super::*;

fn headers(pairs: &[(&'static str, &str)]) -> axum::http::HeaderMap {
    let mut h = axum::http::HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, v.parse().unwrap());
    }
    h
}

#[test]
fn the_guard_checks_host_on_every_request_and_refuses_a_foreign_origin() {
    // GW-5.
    let loopback = RequestGuard::new(allowed_hosts_or_loopback(&None));
    for host in ["127.0.0.1:8931", "localhost", "[::1]:80", "LOCALHOST:1"] {
        assert_eq!(
            loopback.refuses(&headers(&[("host", host)])),
            None,
            "{host}"
        );
    }
    let refused = loopback.refuses(&headers(&[("host", "evil.example")]));
    assert_eq!(
        refused.as_deref(),
        Some("Forbidden: the Host \"evil.example\" is not allowed")
    );
    assert!(loopback.refuses(&headers(&[])).is_some(), "no Host");
    for origin in [
        "http://localhost:3000",
        "https://127.0.0.1",
        "http://[::1]:9",
    ] {
        let h = headers(&[("host", "127.0.0.1:8931"), ("origin", origin)]);
        assert_eq!(loopback.refuses(&h), None, "{origin}");
    }
    for origin in [
        "http://evil.example",
        "null",
        "file://x",
        "http://127.0.0.1.evil.example",
    ] {
        let h = headers(&[("host", "127.0.0.1:8931"), ("origin", origin)]);
        assert!(loopback.refuses(&h).is_some(), "{origin}");
    }
    // A remote gateway (any host, its token guards it): only its own
    // origin, never another site's page.
    let remote = RequestGuard::new(Vec::new());
    let same = headers(&[("host", "gw.example:443"), ("origin", "https://gw.example")]);
    assert_eq!(remote.refuses(&same), None);
    let other = headers(&[("host", "gw.example"), ("origin", "https://evil.example")]);
    assert!(remote.refuses(&other).is_some());
}

#[tokio::test]
async fn every_socket_the_listener_accepts_has_tcp_nodelay() {
    // GW-6: no 40 ms wait for a delayed ACK.
    use axum::serve::Listener;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut listener = no_delay(listener);
    let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (accepted, _) = listener.accept().await;
    assert!(accepted.nodelay().unwrap());
}

#[test]
fn a_uri_matches_the_templates_it_is_an_instance_of() {
    // GW-2: reads routed by template.
    use super::session::matches_template as m;
    let t = "demo://resource/dynamic/text/{resourceId}";
    assert!(m(t, "demo://resource/dynamic/text/7"));
    assert!(!m(t, "demo://resource/dynamic/text/"));
    assert!(!m(t, "demo://resource/dynamic/blob/7"));
    assert!(m("file:///{dir}/{name}.md", "file:///notes/today.md"));
    assert!(!m("file:///{dir}/{name}.md", "file:///notes/today.txt"));
    assert!(!m("file:///{dir}/{name}.md", "file:///notes.md"));
    assert!(!m("no/variables", "no/variables"));
    assert!(!m("broken/{var", "broken/x"));
}

// GW-2: a call's progress goes to its client as it comes, but a client
// that stops reading (its pipe full) holds its own call 5 s at most: the
// note that could not be sent in that time, and every one after it, is
// dropped, and the call's result is not held back.
#[tokio::test(start_paused = true)]
async fn a_client_that_stops_reading_progress_holds_its_call_five_seconds_at_most() {
    struct Quiet;
    impl rmcp::ServerHandler for Quiet {}
    // The client's end of the pipe is never read.
    let (ours, theirs) = tokio::io::duplex(256);
    let running = rmcp::service::serve_directly(Quiet, tokio::io::split(ours), None);
    let sink = crate::ProgressSink::default();
    let work = {
        let sink = sink.clone();
        async move {
            for i in 0..5_000u32 {
                sink.send(crate::ProgressNote {
                    progress: f64::from(i),
                    total: None,
                    message: None,
                });
                tokio::task::yield_now().await;
            }
            "done"
        }
    };
    let token = rmcp::model::ProgressToken(rmcp::model::NumberOrString::Number(7));
    let started = tokio::time::Instant::now();
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        notify::with_progress(&sink, Some(token), running.peer(), work),
    )
    .await;
    assert_eq!(out, Ok("done"), "a client that does not read held its call");
    let held = started.elapsed();
    assert!(
        held >= Duration::from_secs(5) && held < Duration::from_secs(6),
        "held {held:?}"
    );
    drop(theirs);
    let _ = running.cancel().await;
}

// The stdio framing holds a line whole only up to its cap: a longer one
// (here a call) goes to rmcp as it comes, never held or taken as a call;
// the last line, unterminated, is rmcp's too (its codec decides on it).
#[tokio::test]
async fn a_line_over_the_cap_streams_to_rmcp_and_an_unterminated_last_one_is_rmcps() {
    use tokio::io::AsyncReadExt;
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{{\"name\":\"x\",\"arguments\":{{\"s\":\"{}\"}}}}}}\n",
        "a".repeat(stdio::LINE_CAP)
    );
    let input = format!("{big}{{\"short\":1}}\n{{\"last\":2}}");
    let mut read = tokio::io::BufReader::new(input.as_bytes());
    let (mut to_rmcp, mut rmcp) = tokio::io::duplex(64 * 1024);
    let drained = tokio::spawn(async move {
        let mut got = Vec::new();
        rmcp.read_to_end(&mut got).await.unwrap();
        got
    });
    let mut line = Vec::new();
    let next = stdio::next_line(&mut read, &mut line, &mut to_rmcp).await;
    assert_eq!(next, Some(false), "the long line is not held");
    assert!(line.is_empty());
    let next = stdio::next_line(&mut read, &mut line, &mut to_rmcp).await;
    assert_eq!(
        (next, line.as_slice()),
        (Some(true), &b"{\"short\":1}\n"[..])
    );
    let next = stdio::next_line(&mut read, &mut line, &mut to_rmcp).await;
    assert_eq!((next, line.as_slice()), (Some(false), &b"{\"last\":2}"[..]));
    assert_eq!(
        stdio::next_line(&mut read, &mut line, &mut to_rmcp).await,
        None
    );
    drop(to_rmcp);
    assert!(
        drained.await.unwrap() == big.as_bytes(),
        "rmcp got the long line whole"
    );
}
