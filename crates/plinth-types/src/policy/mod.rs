//! The `policy` API group (`v1`): PodDisruptionBudgets, which the eviction subresource
//! honours.

pub mod poddisruptionbudget;
