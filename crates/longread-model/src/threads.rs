//! How many CPU threads tensor work may be given: one bound for every front (the CLI's
//! `--threads`, Python's `threads=`).

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
