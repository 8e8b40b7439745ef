//! How many CPU threads tensor work may be given: one bound for every front (the CLI's
//! `--threads`, Python's `threads=`); and where that work runs in a process forked after it
//! started (Python's multiprocessing, a pre-forking server).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// The process that first ran longread's work (0: none yet). rayon's global pool lives in that
/// process; a process forked from it inherits the pool's state but not its threads, so work
/// given to it there waits forever.
static STARTED_IN: AtomicU32 = AtomicU32::new(0);

/// A forked process's own pools.
struct ForkedPools {
    /// The process that made them.
    pid: u32,
    /// For the work (as many threads as the process is given).
    main: Arc<rayon::ThreadPool>,
    /// One thread, for a helper that feeds the work.
    side: Arc<rayon::ThreadPool>,
}

/// This process's own pools when it is such a fork.
static FORKED_POOLS: Mutex<Option<ForkedPools>> = Mutex::new(None);

/// Runs `f`, which may use rayon (tensor work, tokenization): as it is, or — in a process
/// forked after longread ran in its parent — on a pool of this process's own (as many threads
/// as `RAYON_NUM_THREADS` says, else the cores), since the inherited global pool has no
/// threads. Every entry point of a front that can be forked (the Python package) calls it.
pub fn on_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    match forked_pools() {
        None => f(),
        Some((main, _)) => main.install(f),
    }
}

/// As [`on_pool`], for a helper thread that feeds the work and blocks while it waits (the
/// classifier's document reader): in a forked process it runs on a one-thread pool of its
/// own, so that it never holds a thread the work it feeds needs.
pub fn on_side_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    match forked_pools() {
        None => f(),
        Some((_, side)) => side.install(f),
    }
}

/// Records that this process starts longread's work (and rayon's global pool with it).
pub fn mark_started() {
    let _ = STARTED_IN.compare_exchange(0, std::process::id(), Ordering::SeqCst, Ordering::SeqCst);
}

/// Whether this process was forked after longread ran in an ancestor (recording this process
/// as started when none was).
pub fn is_fork_of_a_started_process() -> bool {
    mark_started();
    STARTED_IN.load(Ordering::SeqCst) != std::process::id()
}

/// The pools of this process when it is a fork of a started one (made at the first call).
fn forked_pools() -> Option<(Arc<rayon::ThreadPool>, Arc<rayon::ThreadPool>)> {
    if !is_fork_of_a_started_process() {
        return None;
    }
    let me = std::process::id();
    let mut pools = FORKED_POOLS.lock().unwrap_or_else(|p| p.into_inner());
    if pools.as_ref().is_none_or(|p| p.pid != me) {
        let threads = std::env::var("RAYON_NUM_THREADS")
            .ok()
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(available_cores);
        let build = |n: usize| rayon::ThreadPoolBuilder::new().num_threads(n).build().map(Arc::new);
        match (build(threads), build(1)) {
            // An ancestor's own pools (a fork of a fork) are left alone, not dropped: their
            // threads are not in this process either.
            (Ok(main), Ok(side)) => std::mem::forget(pools.replace(ForkedPools { pid: me, main, side })),
            // No threads to be had: run on the calling thread, as before.
            _ => return None,
        }
    }
    pools.as_ref().map(|p| (Arc::clone(&p.main), Arc::clone(&p.side)))
}

/// The number of threads this process's pool has: a fork's own pool once made, else rayon's.
pub fn pool_threads() -> usize {
    on_pool(rayon::current_num_threads)
}

/// The cores this process may use (cgroup quotas included), at least 1.
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// `n` if it is a sensible thread count: from 1 to 4 × the available cores (at least 256);
/// beyond that rayon spends minutes starting threads (100,000 never finished). The error
/// names the bound.
pub fn check_thread_count(n: usize) -> Result<usize, String> {
    let cores = available_cores();
    let most = (4 * cores).max(256);
    if n == 0 || n > most {
        return Err(format!("threads {n}: must be between 1 and {most} (4 × the {cores} cores here, at least 256)"));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_outside_one_to_the_bound_are_refused() {
        assert_eq!(check_thread_count(1), Ok(1));
        assert_eq!(check_thread_count(256), Ok(256));
        for n in [0, 100_000, usize::MAX] {
            let err = check_thread_count(n).unwrap_err();
            assert!(err.starts_with(&format!("threads {n}: must be between 1 and ")), "{err}");
        }
    }
}
