//! Plinth's benchmarks; the bench targets live in `benches/`. Run `cargo bench -p plinth-benches`.

#![forbid(unsafe_code)]
