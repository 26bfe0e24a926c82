//! The machine's load while a job runs ([`MachineLoad`]): the kernel's CPU counters at the
//! job's start and end. Linux only (`/proc`); elsewhere no load is recorded.
//!
//! `/proc/stat`'s first line sums every CPU's time in clock ticks by state (`user nice system
//! idle iowait irq softirq steal ...`, proc(5)); `/proc/self/stat` fields 14 and 15 are this
//! process's user and system ticks, its threads included. Between two readings, the machine's
//! busy ticks less the process's own are what other processes took; divided by the ticks of
//! one CPU over the same wall time, they are the CPUs other processes kept busy.
//!
//! For a job on a GPU the probe also asks `nvidia-smi` at the start and the end which other
//! compute processes hold the GPU and, at the end, what share of its SMs they kept busy
//! ([`GpuLoad`]). A machine without `nvidia-smi` records no GPU load.

use memwall_core::measure::{GpuLoad, MachineLoad};
use std::time::Instant;

/// One reading of the counters.
#[derive(Debug, Clone, Copy)]
pub struct LoadProbe {
    machine: CpuTicks,
    own: u64,
    at: Instant,
    /// Other compute processes on the GPU at the start (count, bytes), for a GPU job.
    gpu: Option<(usize, u64)>,
}

/// The machine's CPU ticks by what they were spent on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CpuTicks {
    /// user + nice + system + irq + softirq.
    busy: u64,
    /// Every state, idle and iowait included.
    total: u64,
    /// Ticks the hypervisor stole.
    steal: u64,
    /// `cpuN` lines.
    cpus: usize,
}

impl LoadProbe {
    /// Reads the counters now; `None` where `/proc` cannot be read.
    pub fn start() -> Option<LoadProbe> {
        Some(LoadProbe {
            machine: parse_stat(&std::fs::read_to_string("/proc/stat").ok()?)?,
            own: parse_self_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)?,
            at: Instant::now(),
            gpu: None,
        })
    }

    /// [`LoadProbe::start`], and for a job on a GPU (`gpu`) the other compute processes on it.
    pub fn start_for(gpu: bool) -> Option<LoadProbe> {
        let mut probe = LoadProbe::start()?;
        if gpu {
            probe.gpu = Some(gpu_processes().unwrap_or((0, 0)));
        }
        Some(probe)
    }

    /// The load since [`LoadProbe::start`]; `None` where `/proc` cannot be read or no tick
    /// passed.
    pub fn finish(&self) -> Option<MachineLoad> {
        let end = LoadProbe::start()?;
        let total = end.machine.total.checked_sub(self.machine.total)?;
        if total == 0 || end.machine.cpus == 0 {
            return None;
        }
        let busy = end.machine.busy.saturating_sub(self.machine.busy);
        let own = end.own.saturating_sub(self.own);
        let steal = end.machine.steal.saturating_sub(self.machine.steal);
        // Ticks of one CPU over the window: the machine's ticks over its CPUs.
        let per_cpu = total as f64 / end.machine.cpus as f64;
        let load_avg_1m = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(f64::NAN);
        Some(MachineLoad {
            other_busy_cpus: busy.saturating_sub(own) as f64 / per_cpu,
            steal_share: steal as f64 / total as f64,
            load_avg_1m,
            cpus: end.machine.cpus,
            wall_s: end.at.duration_since(self.at).as_secs_f64(),
            gpu: self.gpu.and_then(|(count, bytes)| {
                let (end_count, end_bytes) = gpu_processes()?;
                let other_processes = count.max(end_count);
                Some(GpuLoad {
                    other_processes,
                    other_memory_bytes: bytes.max(end_bytes),
                    // `pmon` samples for about a second: asked only when there is someone to
                    // ask about, so a GPU job alone on its device does not wait for it.
                    other_sm_percent: if other_processes > 0 {
                        gpu_sm_percent()
                    } else {
                        None
                    },
                })
            }),
        })
    }
}

/// Output of `nvidia-smi` with `args`, `None` where it cannot be run or fails.
fn nvidia_smi(args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("nvidia-smi")
        .args(args)
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Compute processes on the GPU other than this one: (count, bytes held).
fn gpu_processes() -> Option<(usize, u64)> {
    let text = nvidia_smi(&[
        "--query-compute-apps=pid,used_memory",
        "--format=csv,noheader,nounits",
    ])?;
    let own = std::process::id();
    let others: Vec<(u32, u64)> = parse_compute_apps(&text)
        .into_iter()
        .filter(|&(pid, _)| pid != own)
        .collect();
    Some((others.len(), others.iter().map(|&(_, b)| b).sum()))
}

/// Percent of the SMs other processes kept busy (summed), `None` where no number was given.
fn gpu_sm_percent() -> Option<f64> {
    let text = nvidia_smi(&["pmon", "-c", "1", "-s", "u"])?;
    let own = std::process::id();
    let shares: Vec<f64> = parse_pmon(&text)
        .into_iter()
        .filter(|&(pid, _)| pid != own)
        .filter_map(|(_, sm)| sm)
        .collect();
    (!shares.is_empty()).then(|| shares.iter().sum())
}

/// `pid, used_memory` lines (MiB, `--format=csv,noheader,nounits`) as (pid, bytes).
fn parse_compute_apps(text: &str) -> Vec<(u32, u64)> {
    text.lines()
        .filter_map(|l| {
            let (pid, mib) = l.split_once(',')?;
            Some((
                pid.trim().parse().ok()?,
                mib.trim().parse::<u64>().ok()? << 20,
            ))
        })
        .collect()
}

/// `pmon -s u` rows (`gpu pid type sm mem ...`; `#` lines are headers, `-` no number) as
/// (pid, SM percent).
fn parse_pmon(text: &str) -> Vec<(u32, Option<f64>)> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((f.get(1)?.parse().ok()?, f.get(3)?.parse().ok()))
        })
        .collect()
}

/// The first line of `/proc/stat` (the sum over CPUs) and the count of `cpuN` lines.
fn parse_stat(text: &str) -> Option<CpuTicks> {
    let mut lines = text.lines();
    let first = lines.next()?;
    let mut fields = first.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = fields.filter_map(|f| f.parse().ok()).collect();
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal (guest time is inside user already).
    let busy = at(0) + at(1) + at(2) + at(5) + at(6);
    let total = busy + at(3) + at(4) + at(7);
    let cpus = text
        .lines()
        .filter(|l| {
            l.strip_prefix("cpu")
                .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
        })
        .count();
    Some(CpuTicks {
        busy,
        total,
        steal: at(7),
        cpus,
    })
}

/// utime + stime of `/proc/self/stat` (fields 14 and 15; the command name in field 2 may hold
/// spaces and parentheses, so fields are counted after its last `)`).
fn parse_self_stat(text: &str) -> Option<u64> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, so utime (14) and stime (15) are at 11 and 12.
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernels_counters() {
        let stat = "cpu  100 5 50 1000 20 3 2 7 0 0\ncpu0 50 2 25 500 10 1 1 3 0 0\n\
                    cpu1 50 3 25 500 10 2 1 4 0 0\nintr 1 2 3\n";
        assert_eq!(
            parse_stat(stat),
            Some(CpuTicks {
                busy: 160,
                total: 1187,
                steal: 7,
                cpus: 2
            })
        );
        let own = "4242 (memwall job (x)) R 1 2 3 4 5 6 7 8 9 10 31 9 0 0 20 0 3 0 1";
        assert_eq!(parse_self_stat(own), Some(40));
        assert_eq!(parse_stat("intr 1\n"), None);
    }

    #[test]
    fn parses_nvidia_smis_processes_and_their_sm_shares() {
        assert_eq!(
            parse_compute_apps("12345, 2048\n777, 10\n[Not Supported]\n"),
            vec![(12345, 2048 << 20), (777, 10 << 20)]
        );
        assert!(parse_compute_apps("No running processes found\n").is_empty());
        let pmon = "# gpu         pid   type     sm    mem    enc    dec    command\n\
                    # Idx           #    C/G      %      %      %      %    name\n\
                    \x20   0      12345     C     45     10      -      -    python3\n\
                    \x20   0        777     C      -      -      -      -    job\n\
                    \x20   0          -     -      -      -      -      -    -\n";
        assert_eq!(parse_pmon(pmon), vec![(12345, Some(45.0)), (777, None)]);
        let load = |sm| GpuLoad {
            other_processes: 1,
            other_memory_bytes: 2 << 30,
            other_sm_percent: sm,
        };
        assert!(load(Some(45.0)).loaded() && !load(None).loaded() && !load(Some(0.0)).loaded());
        assert!(!GpuLoad {
            other_processes: 0,
            ..load(None)
        }
        .loaded());
    }

    /// On this machine (Linux): a process that spins beside the window makes it loaded.
    #[test]
    fn a_spinning_process_is_seen_as_a_busy_cpu() {
        if LoadProbe::start().is_none() {
            return; // no /proc: nothing recorded, nothing to check
        }
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        let p = LoadProbe::start().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(600));
        let seen = p.finish().unwrap();
        let _ = child.kill();
        let _ = child.wait();
        // The spinner takes what the machine gives it: about a CPU on a quiet one; on a
        // virtual machine whose hypervisor steals time (CI here once: 67.5% stolen, 0.23 CPU
        // left to the spinner) the steal alone marks the window as loaded.
        assert!(seen.other_busy_cpus > 0.0, "{seen:?}");
        assert!(
            seen.other_busy_cpus >= memwall_core::measure::LOADED_CPUS
                || seen.steal_share >= memwall_core::measure::LOADED_STEAL,
            "{seen:?}"
        );
        assert!(seen.loaded() && seen.wall_s >= 0.6 && seen.cpus >= 1);
    }
}
