//! Cron schedules as CronJobs write them (the standard five fields of robfig/cron, which
//! kube-controller-manager uses): minute, hour, day of month, month (`1-12` or `JAN`–`DEC`),
//! day of week (`0-6` or `SUN`–`SAT`), each `*`/`?`, values, ranges and `/steps` in
//! comma-separated lists; the descriptors `@yearly`, `@annually`, `@monthly`, `@weekly`,
//! `@daily`, `@midnight`, `@hourly` and `@every <duration>`. When both day fields are
//! restricted, a day matching either runs (as cron does). Times are computed in a time zone
//! from the IANA database.

use chrono::{DateTime, Datelike, Duration, TimeZone, Timelike, Utc};

/// A parsed schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// Five fields, each as a bit set of the values it allows.
    Fields {
        /// Minutes 0–59.
        minutes: u64,
        /// Hours 0–23.
        hours: u64,
        /// Days of the month 1–31.
        days: u64,
        /// Months 1–12.
        months: u64,
        /// Days of the week 0–6 (Sunday 0).
        weekdays: u64,
        /// Whether the day of the month or the day of the week was `*` (then both must
        /// match; otherwise either).
        any_day: bool,
    },
    /// `@every <duration>`: from a start, every so many seconds.
    Every(i64),
}

/// Why a schedule does not parse, worded as robfig/cron words it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CronError(pub String);

const MONTHS: &[&str] = &[
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

fn number(text: &str, names: &[&str], offset: u32) -> Result<u32, CronError> {
    if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(text)) {
        return Ok(u32::try_from(i).unwrap_or(0) + offset);
    }
    text.parse::<u32>().map_err(|_| {
        CronError(format!(
            "failed to parse int from {text}: strconv.Atoi: parsing {text:?}: invalid syntax"
        ))
    })
}

/// One field: a bit per allowed value in `min..=max`; whether it was `*`/`?`.
fn field(
    text: &str,
    min: u32,
    max: u32,
    names: &[&str],
    offset: u32,
) -> Result<(u64, bool), CronError> {
    let mut bits = 0u64;
    let mut star = false;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => (
                range,
                Some(step.parse::<u32>().map_err(|_| {
                    CronError(format!(
                        "failed to parse int from {step}: strconv.Atoi: parsing {step:?}: invalid syntax"
                    ))
                })?),
            ),
            None => (part, None),
        };
        let (start, end) = if range == "*" || range == "?" {
            if step.is_none() {
                star = true;
            }
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (number(a, names, offset)?, number(b, names, offset)?)
        } else {
            let a = number(range, names, offset)?;
            (a, if step.is_some() { max } else { a })
        };
        if start < min {
            return Err(CronError(format!(
                "beginning of range ({start}) below minimum ({min}): {part}"
            )));
        }
        if end > max {
            return Err(CronError(format!(
                "end of range ({end}) above maximum ({max}): {part}"
            )));
        }
        if start > end {
            return Err(CronError(format!(
                "beginning of range ({start}) beyond end of range ({end}): {part}"
            )));
        }
        let step = step.unwrap_or(1);
        if step == 0 {
            return Err(CronError(format!(
                "step of range should be a positive number: {part}"
            )));
        }
        let mut v = start;
        while v <= end {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok((bits, star))
}

impl Schedule {
    /// Parses a schedule.
    ///
    /// # Errors
    /// A [`CronError`] with robfig/cron's message.
    pub fn parse(text: &str) -> Result<Self, CronError> {
        let text = text.trim();
        let expanded = match text {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other => {
                if let Some(every) = other.strip_prefix("@every ") {
                    let seconds =
                        crate::meta::go_duration_seconds(every.trim()).ok_or_else(|| {
                            CronError(format!(
                                "failed to parse duration {other}: time: invalid duration {:?}",
                                every.trim()
                            ))
                        })?;
                    return Ok(Self::Every(seconds.max(1)));
                }
                if other.starts_with('@') {
                    return Err(CronError(format!("unrecognized descriptor: {other}")));
                }
                other
            }
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(CronError(format!(
                "expected exactly 5 fields, found {}: [{}]",
                fields.len(),
                fields.join(" ")
            )));
        }
        let (minutes, _) = field(fields[0], 0, 59, &[], 0)?;
        let (hours, _) = field(fields[1], 0, 23, &[], 0)?;
        let (days, day_star) = field(fields[2], 1, 31, &[], 0)?;
        let (months, _) = field(fields[3], 1, 12, MONTHS, 1)?;
        let (weekdays, weekday_star) = field(fields[4], 0, 6, WEEKDAYS, 0)?;
        Ok(Self::Fields {
            minutes,
            hours,
            days,
            months,
            weekdays,
            any_day: day_star || weekday_star,
        })
    }

    /// The first time strictly after `after` that the schedule fires, in `zone`; `None` if
    /// none within five years (a date that never comes, as February 30th).
    pub fn next_after<Z: TimeZone>(&self, after: DateTime<Utc>, zone: &Z) -> Option<DateTime<Utc>> {
        let (minutes, hours, days, months, weekdays, any_day) = match *self {
            Self::Every(seconds) => {
                return after.checked_add_signed(Duration::try_seconds(seconds)?);
            }
            Self::Fields {
                minutes,
                hours,
                days,
                months,
                weekdays,
                any_day,
            } => (minutes, hours, days, months, weekdays, any_day),
        };
        let has = |bits: u64, v: u32| bits & (1 << v) != 0;
        // Walk local wall-clock minutes from the next whole minute.
        let start = after.with_timezone(zone).naive_local();
        let mut t = start.with_second(0).and_then(|t| t.with_nanosecond(0))? + Duration::minutes(1);
        let limit = start + Duration::days(5 * 366);
        while t < limit {
            if !has(months, t.month()) {
                let (y, m) = if t.month() == 12 {
                    (t.year() + 1, 1)
                } else {
                    (t.year(), t.month() + 1)
                };
                t = chrono::NaiveDate::from_ymd_opt(y, m, 1)?.and_hms_opt(0, 0, 0)?;
                continue;
            }
            let day = has(days, t.day());
            let weekday = has(weekdays, t.weekday().num_days_from_sunday());
            let day_ok = if any_day {
                day && weekday
            } else {
                day || weekday
            };
            if !day_ok {
                t = (t.date() + Duration::days(1)).and_hms_opt(0, 0, 0)?;
                continue;
            }
            if !has(hours, t.hour()) {
                t = t.with_minute(0)? + Duration::hours(1);
                continue;
            }
            if !has(minutes, t.minute()) {
                t += Duration::minutes(1);
                continue;
            }
            // A wall-clock time a daylight-saving jump skips does not happen; an ambiguous
            // one happens at its first instant.
            if let Some(local) = zone.from_local_datetime(&t).earliest() {
                let at = local.with_timezone(&Utc);
                if at > after {
                    return Some(at);
                }
            }
            t += Duration::minutes(1);
        }
        None
    }
}

/// The IANA time zone called `name` (`Etc/UTC`, `Europe/Berlin`).
///
/// # Errors
/// kube's message for an unknown zone.
pub fn zone(name: &str) -> Result<chrono_tz::Tz, CronError> {
    name.parse::<chrono_tz::Tz>()
        .map_err(|_| CronError(format!("unknown time zone {name}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn schedules_fire_when_cron_would() {
        let every_five = Schedule::parse("*/5 * * * *").unwrap();
        assert_eq!(
            every_five.next_after(at("2026-01-01T10:02:30Z"), &Utc),
            Some(at("2026-01-01T10:05:00Z"))
        );
        assert_eq!(
            every_five.next_after(at("2026-01-01T10:05:00Z"), &Utc),
            Some(at("2026-01-01T10:10:00Z"))
        );
        let weekday_mornings = Schedule::parse("30 9 * * MON-FRI").unwrap();
        // 2026-01-03 is a Saturday.
        assert_eq!(
            weekday_mornings.next_after(at("2026-01-02T10:00:00Z"), &Utc),
            Some(at("2026-01-05T09:30:00Z"))
        );
        let either_day = Schedule::parse("0 0 13 * 5").unwrap();
        // Friday 2026-01-02, before the 13th.
        assert_eq!(
            either_day.next_after(at("2026-01-01T12:00:00Z"), &Utc),
            Some(at("2026-01-02T00:00:00Z"))
        );
        let yearly = Schedule::parse("@yearly").unwrap();
        assert_eq!(
            yearly.next_after(at("2026-03-01T00:00:00Z"), &Utc),
            Some(at("2027-01-01T00:00:00Z"))
        );
        assert_eq!(
            Schedule::parse("0 0 30 2 *")
                .unwrap()
                .next_after(at("2026-01-01T00:00:00Z"), &Utc),
            None
        );
        let berlin = zone("Europe/Berlin").unwrap();
        assert_eq!(
            Schedule::parse("0 9 * * *")
                .unwrap()
                .next_after(at("2026-07-01T00:00:00Z"), &berlin),
            Some(at("2026-07-01T07:00:00Z")),
            "09:00 in Berlin's summer is 07:00 UTC"
        );
        assert_eq!(
            Schedule::parse("@every 90s")
                .unwrap()
                .next_after(at("2026-01-01T00:00:00Z"), &Utc),
            Some(at("2026-01-01T00:01:30Z"))
        );
    }

    /// Found by `scripts/fuzz` (target `cron`): an `@every` longer than Go's durations reach
    /// overflowed the next-run arithmetic and panicked. Go refuses such a duration; so does
    /// this, and a long one that parses never overflows.
    #[test]
    fn an_every_beyond_gos_durations_is_refused_not_a_panic() {
        let huge = "@every 1999999999999999999999999999h3m";
        assert_eq!(
            Schedule::parse(huge).unwrap_err().0,
            "failed to parse duration @every 1999999999999999999999999999h3m: time: invalid duration \"1999999999999999999999999999h3m\""
        );
        // The longest Go takes (2,562,047 h) parses, and the next run is computed or none.
        let longest = Schedule::parse("@every 2562047h").unwrap();
        assert!(
            longest
                .next_after(at("2026-01-01T00:00:00Z"), &Utc)
                .is_some()
        );
        assert!(
            Schedule::Every(i64::MAX)
                .next_after(at("2026-01-01T00:00:00Z"), &Utc)
                .is_none()
        );
    }

    #[test]
    fn bad_schedules_say_what_robfig_says() {
        assert_eq!(
            Schedule::parse("x").unwrap_err().0,
            "expected exactly 5 fields, found 1: [x]"
        );
        assert!(
            Schedule::parse("61 * * * *")
                .unwrap_err()
                .0
                .contains("above maximum (59)")
        );
        assert!(
            Schedule::parse("a * * * *")
                .unwrap_err()
                .0
                .contains("failed to parse int from a")
        );
        assert!(
            Schedule::parse("5-1 * * * *")
                .unwrap_err()
                .0
                .contains("beyond end of range")
        );
        assert!(
            Schedule::parse("@sometimes")
                .unwrap_err()
                .0
                .contains("unrecognized descriptor")
        );
        assert!(zone("Mars/Olympus").is_err());
    }
}
