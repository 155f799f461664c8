//! Fuzz target: `mcpvisor::fuzzing::model_responses` (see its docs for what reads the bytes).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcpvisor::fuzzing::model_responses(data));
