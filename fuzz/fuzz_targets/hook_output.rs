//! Fuzz target: `mcpvisor::fuzzing::hook_output` (see its docs for what reads the bytes).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcpvisor::fuzzing::hook_output(data));
