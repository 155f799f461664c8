//! OBS-3: every actor message runs in a `tracing` span naming its actor and
//! scope/server/generation. Its own test binary: it installs the global
//! subscriber, which must not race other tests' callsites.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcpvisor::{Runtime, Scope};
use mcpvisor_chaos::{fault_server_config, start_with_server};

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_actor_message_runs_in_a_span_naming_its_scope_and_server() {
    let buf = Buf::default();
    let writer = buf.clone();
    tracing_subscriber::fmt()
        .with_env_filter("mcpvisor=debug")
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();
    let cfg = fault_server_config("srv", Vec::<String>::new());
    let runtime = start_with_server(Runtime::builder(), Scope::Agent("a1".into()), cfg)
        .await
        .unwrap();
    assert!(runtime.shutdown(Duration::from_secs(20)).await.is_clean());
    let out = String::from_utf8_lossy(&buf.0.lock().unwrap()).to_string();
    for want in [
        "root_supervisor{",
        "scope_supervisor{scope=agent:a1}",
        "tool_registry{scope=agent:a1}",
        "server_supervisor{scope=agent:a1 server=srv conn_gen=1",
        "connection{server=srv conn_gen=1}",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
}
