//! The `batch` API group (`v1`): Jobs, which run pods to completion, and CronJobs, which
//! create Jobs on a schedule.

pub mod cronjob;
pub mod job;
