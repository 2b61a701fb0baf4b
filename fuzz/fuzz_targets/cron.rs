//! CronJob schedules (five fields, `@every`, `@hourly`, `TZ=`) and time zone names, with
//! the next run computed from a fixed instant.
#![no_main]

use chrono::{TimeZone, Utc};
use libfuzzer_sys::fuzz_target;
use plinth_core::cron::{Schedule, zone};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Some(now) = Utc.with_ymd_and_hms(2026, 12, 5, 12, 0, 0).single() else {
        return;
    };
    if let Ok(schedule) = Schedule::parse(text) {
        let _ = schedule.next_after(now, &Utc);
    }
    if let Ok(tz) = zone(text)
        && let Ok(schedule) = Schedule::parse("*/5 * * * *")
    {
        let _ = schedule.next_after(now, &tz);
    }
});
