//! Fuzz target: `mcpvisor::fuzzing::stdio_stdout` (see its docs for what reads the bytes).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcpvisor::fuzzing::stdio_stdout(data));
