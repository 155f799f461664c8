//! chaos
