//! Fuzz targets for every decoder of untrusted bytes in Shoal (docs/fuzzing.md). The harness
//! bodies live in harness.rs, which agent/tests/fuzz_corpus.rs also includes to replay the
//! committed corpora on stable.

#[path = "harness.rs"]
pub mod harness;
