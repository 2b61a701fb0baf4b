//! scheduling.k8s.io/v1: PriorityClasses.

pub mod priorityclass;
