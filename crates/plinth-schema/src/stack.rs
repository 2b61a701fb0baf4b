//! Work whose recursion depth follows its input, run where the stack is large enough for it.
//!
//! The `cel` crate parses, evaluates and drops expressions recursively, and how deep it goes
//! follows the rule's text: sixteen unclosed parentheses or a 100-term sum already overflow
//! the 2 MiB stack of a test or tokio worker thread in a debug build, which aborts the whole
//! process. Compiling a schema (rare: a CRD write or a server start) therefore always runs on
//! a thread of its own with [`COMPILE_STACK`] bytes of stack, and evaluating a rule whose
//! expression is deeper than [`INLINE_DEPTH`] runs on one with [`EVALUATE_STACK`] bytes; the
//! depth of every rule is bounded when it is compiled (`cel::MAX_DEPTH`), so those sizes cover
//! the deepest rule that compiles. The stack is reserved, not committed: a shallow rule
//! touches a few pages of it.

/// The stack a schema compiles on.
pub(crate) const COMPILE_STACK: usize = 1 << 30;
/// The stack a deep rule is evaluated on.
pub(crate) const EVALUATE_STACK: usize = 256 << 20;
/// Rules no deeper than this are evaluated on the caller's stack.
pub(crate) const INLINE_DEPTH: usize = 24;

/// Runs `work` on a scoped thread with `stack` bytes of stack and returns what it returns; a
/// panic in `work` continues in the caller. `None` when no thread could be started.
pub(crate) fn on_stack<T: Send>(stack: usize, work: impl FnOnce() -> T + Send) -> Option<T> {
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("plinth-schema-deep".into())
            .stack_size(stack)
            .spawn_scoped(scope, work)
            .ok()?;
        match handle.join() {
            Ok(value) => Some(value),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}
