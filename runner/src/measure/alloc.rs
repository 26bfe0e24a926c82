//! A counting global allocator: live heap bytes and their high-water mark.
//!
//! Blocks come from the system allocator. On glibc it is told, once, before the first block, to
//! keep freed memory for reuse ([`keep_freed_memory`]).
//!
//! A memory limit ([`set_limit`]) makes the CPU behave like a device of that size: a block
//! that would take the live bytes past it is refused (the allocator returns null, so Rust's
//! `handle_alloc_error` prints `memory allocation of N bytes failed` and aborts the process),
//! which the job's parent records as `out_of_memory` ([`crate::job::run_in_process`]).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static CURRENT: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);
static CONFIGURED: AtomicBool = AtomicBool::new(false);
/// Live bytes past which a block is refused; `u64::MAX`: no limit.
static LIMIT: AtomicU64 = AtomicU64::new(u64::MAX);

/// Tells glibc's malloc to keep freed blocks for reuse instead of returning them to the kernel.
///
/// By default glibc serves every block over its (adaptive) mmap threshold, 128 KiB at first, with
/// its own `mmap` and `munmap`s it on free, and trims the heap top over 128 KiB. A training step
/// frees and allocates the same megabyte-sized activations over and over, so on the CPU backend
/// it paid a page fault for every fresh page: 15% of a flex step's CPU time at the `cpu`
/// profile's shape (issue 28; `reference/perf_step_profile.py`). With the mmap threshold at its
/// largest (32 MiB on 64-bit, glibc's `DEFAULT_MMAP_THRESHOLD_MAX`) and a 1 GiB trim threshold,
/// freed blocks stay in malloc's free lists (`mallopt(3)`). What is counted does not change:
/// the counters see each block's `Layout::size` whatever the allocator does underneath, so the
/// peak stays exact; only the process's resident set keeps its high-water mark.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets malloc parameters; it is called once, outside any allocation.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

/// Runs [`keep_freed_memory`] before the process's first block.
#[inline]
fn configure_once() {
    if !CONFIGURED.load(Ordering::Relaxed) && !CONFIGURED.swap(true, Ordering::Relaxed) {
        keep_freed_memory();
    }
}

/// Wraps the system allocator and counts live bytes (`Layout::size` of each block).
pub struct CountingAlloc;

impl CountingAlloc {
    /// Counts `size` more live bytes, unless that takes them past the limit: then nothing is
    /// counted and the block must be refused (false).
    #[inline]
    fn reserve(size: usize) -> bool {
        let now = CURRENT.fetch_add(size as u64, Ordering::Relaxed) + size as u64;
        if now > LIMIT.load(Ordering::Relaxed) {
            CURRENT.fetch_sub(size as u64, Ordering::Relaxed);
            refused(size);
            return false;
        }
        PEAK.fetch_max(now, Ordering::Relaxed);
        true
    }
    #[inline]
    fn sub(size: usize) {
        CURRENT.fetch_sub(size as u64, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded to `System` unchanged; only counters are updated.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        configure_once();
        if !Self::reserve(layout.size()) {
            return std::ptr::null_mut();
        }
        let p = System.alloc(layout);
        if p.is_null() {
            Self::sub(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        configure_once();
        if !Self::reserve(layout.size()) {
            return std::ptr::null_mut();
        }
        let p = System.alloc_zeroed(layout);
        if p.is_null() {
            Self::sub(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        Self::sub(layout.size());
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // The new block is counted before it exists (as a device would refuse it), the old one
        // released once it is gone.
        if !Self::reserve(new_size) {
            return std::ptr::null_mut();
        }
        let p = System.realloc(ptr, layout, new_size);
        if p.is_null() {
            Self::sub(new_size);
        } else {
            Self::sub(layout.size());
        }
        p
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Live heap bytes of the process now.
pub fn allocated_bytes() -> u64 {
    CURRENT.load(Ordering::Relaxed)
}

/// High-water mark of live heap bytes since the last [`reset_peak`].
pub fn peak_allocated_bytes() -> u64 {
    PEAK.load(Ordering::Relaxed)
}

/// Starts a new high-water mark from the bytes live now.
pub fn reset_peak() {
    PEAK.store(CURRENT.load(Ordering::Relaxed), Ordering::Relaxed);
}

/// Sets the process's memory limit, bytes of live heap (`None`: no limit). From then on a block
/// that would take [`allocated_bytes`] past it is refused, which aborts the process with
/// `memory allocation of N bytes failed` (Rust's `handle_alloc_error`): the CPU stand-in for a
/// device of that size. Blocks live before the call stay; a limit below them refuses the next
/// block.
pub fn set_limit(bytes: Option<u64>) {
    LIMIT.store(bytes.unwrap_or(u64::MAX), Ordering::Relaxed);
}

/// The memory limit set by [`set_limit`], if any.
pub fn limit() -> Option<u64> {
    let l = LIMIT.load(Ordering::Relaxed);
    (l != u64::MAX).then_some(l)
}

/// Says on stderr, without allocating, that the limit refused a block of `size` bytes, in the
/// words the job's fault reader takes the requested bytes from (`memory allocation of N
/// bytes`, [`crate::measure::fault::classify`]); glibc Linux only, elsewhere silent.
fn refused(size: usize) {
    let mut line = [0u8; 128];
    let mut n = 0;
    let mut put = |bytes: &[u8]| {
        for &b in bytes {
            if n < line.len() {
                line[n] = b;
                n += 1;
            }
        }
    };
    put(b"memory allocation of ");
    let mut digits = [0u8; 20];
    let (mut v, mut k) = (size, digits.len());
    loop {
        k -= 1;
        digits[k] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    put(&digits[k..]);
    put(b" bytes refused by the job's memory limit (out of memory)\n");
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: write(2) of a stack buffer to stderr; no allocation, any result is ignored.
    unsafe {
        libc::write(2, line.as_ptr().cast(), n);
    }
}
