//! Fault injection for the nightly's alarms (issue 56): a job can be told to make each of its
//! steps take a given factor longer, so a test (or a lab checking its nightly) can plant a
//! real slowdown in one configuration of tonight's binary and see the nightly flag exactly that
//! one after its confirmation reruns. Off unless `run-job --inject-slowdown` names the job.

use memwall_core::spec::JobSpec;
use std::sync::atomic::{AtomicU64, Ordering};

/// A slowdown planted in one configuration: every step of `study`/`config` takes `factor`
/// times its own time (the step is timed, then the thread sleeps `factor - 1` times that long
/// before the timer stops).
#[derive(Debug, Clone, PartialEq)]
pub struct Slowdown {
    /// Study name.
    pub study: String,
    /// Configuration name.
    pub config: String,
    /// How many times longer each step takes (above 1).
    pub factor: f64,
}

impl std::str::FromStr for Slowdown {
    type Err = String;

    /// Parses `STUDY/CONFIG=FACTOR`, e.g. `peak_memory/control=2`.
    ///
    /// # Errors
    /// The text without a `/` or `=`, or a factor that is not a finite number above 1.
    fn from_str(s: &str) -> Result<Self, String> {
        let usage = "expected STUDY/CONFIG=FACTOR, e.g. `peak_memory/control=2` (every step of \
                     that configuration takes twice as long)";
        let (name, factor) = s
            .rsplit_once('=')
            .ok_or_else(|| format!("`{s}`: no `=`: {usage}"))?;
        let (study, config) = name
            .split_once('/')
            .ok_or_else(|| format!("`{s}`: no `/` between study and configuration: {usage}"))?;
        let factor: f64 = factor
            .trim()
            .parse()
            .map_err(|_| format!("`{s}`: the factor `{factor}` is not a number: {usage}"))?;
        if !factor.is_finite() || factor <= 1.0 {
            return Err(format!(
                "`{s}`: the factor {factor} is not above 1 (a slowdown makes steps longer): {usage}"
            ));
        }
        if study.is_empty() || config.is_empty() {
            return Err(format!("`{s}`: empty study or configuration: {usage}"));
        }
        Ok(Slowdown {
            study: study.to_string(),
            config: config.to_string(),
            factor,
        })
    }
}

/// The factor in force in this process (the bits of an `f64`; 1.0: none).
static FACTOR: AtomicU64 = AtomicU64::new(0x3FF0_0000_0000_0000);

/// Plants `slowdown` in this process if it names `job`'s study and configuration; returns
/// whether it does.
pub fn install(slowdown: &Slowdown, job: &JobSpec) -> bool {
    let hit = slowdown.study == job.study && slowdown.config == job.config;
    if hit {
        FACTOR.store(slowdown.factor.to_bits(), Ordering::Relaxed);
        tracing::warn!(
            "fault injection: every step of {}/{} takes {}x its time (--inject-slowdown)",
            job.study,
            job.config,
            slowdown.factor
        );
    }
    hit
}

/// The factor in force (1.0 when nothing was planted).
pub fn factor() -> f64 {
    f64::from_bits(FACTOR.load(Ordering::Relaxed))
}

/// Sleeps `factor() - 1` times `elapsed` seconds (nothing when no slowdown is planted).
pub fn stretch(elapsed: f64) {
    let f = factor();
    if f > 1.0 && elapsed > 0.0 {
        std::thread::sleep(std::time::Duration::from_secs_f64(elapsed * (f - 1.0)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slowdown_names_study_configuration_and_factor() {
        let s: Slowdown = "peak_memory/control=2.5".parse().unwrap();
        assert_eq!(
            s,
            Slowdown {
                study: "peak_memory".into(),
                config: "control".into(),
                factor: 2.5
            }
        );
        for bad in [
            "control=2",
            "peak_memory/control",
            "a/b=x",
            "a/b=1",
            "a/b=0.5",
            "/b=2",
            "a/=2",
        ] {
            let e = bad.parse::<Slowdown>().unwrap_err();
            assert!(e.contains("STUDY/CONFIG=FACTOR"), "{bad}: {e}");
        }
    }
}
