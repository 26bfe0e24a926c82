//! A counting global allocator: live heap bytes and their high-water mark.
//!
//! Blocks come from the system allocator. On glibc it is told, once, before the first block, to
//! keep freed memory for reuse ([`keep_freed_memory`]).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static CURRENT: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);
static CONFIGURED: AtomicBool = AtomicBool::new(false);

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
    #[inline]
    fn add(size: usize) {
        let now = CURRENT.fetch_add(size as u64, Ordering::Relaxed) + size as u64;
        PEAK.fetch_max(now, Ordering::Relaxed);
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
        let p = System.alloc(layout);
        if !p.is_null() {
            Self::add(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        configure_once();
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            Self::add(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        Self::sub(layout.size());
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            Self::sub(layout.size());
            Self::add(new_size);
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
