//! The `autoscaling` API group: HorizontalPodAutoscalers, served in `v2` (stored so) and `v1`
//! (its CPU-only view, the rest kept in annotations as kube keeps it).

pub mod hpa;
