//! `longread reference`: the committed command reference (docs/cli.md) is what the code says,
//! and the man pages and shell completions come out of the same definitions.

mod common;

use common::{assert_clean_failure, longread, repo};

/// Fails when docs/cli.md differs from the generated page: regenerate it with
/// `cargo run --release -p longread-cli -- reference --markdown docs/cli.md`.
#[test]
fn the_committed_reference_is_up_to_date() {
    let tmp = tempfile::tempdir().unwrap();
    let page = tmp.path().join("cli.md");
    let out = longread(&["reference", "--markdown", page.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let generated = std::fs::read_to_string(&page).unwrap();
    let committed = std::fs::read_to_string(repo().join("docs/cli.md")).unwrap_or_default();
    if generated != committed {
        let first = generated
            .lines()
            .zip(committed.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| generated.lines().count().min(committed.lines().count()));
        panic!(
            "docs/cli.md differs from the code from line {} on; regenerate it with \
             `cargo run --release -p longread-cli -- reference --markdown docs/cli.md`\n\
             generated: {:?}\ncommitted: {:?}",
            first + 1,
            generated.lines().nth(first),
            committed.lines().nth(first)
        );
    }
}

/// Every command and flag of `--help` is on the page, with its default.
#[test]
fn the_reference_lists_every_command_and_its_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let page = tmp.path().join("cli.md");
    assert!(longread(&["reference", "--markdown", page.to_str().unwrap()]).status.success());
    let page = std::fs::read_to_string(&page).unwrap();
    for heading in ["## `longread train`", "## `longread serve`", "### `longread tokenizer train`", "## Global options"]
    {
        assert!(page.contains(heading), "{heading} missing");
    }
    assert!(page.contains("- `--port <PORT>` (default: `8080`)"), "serve's port and its default");
    assert!(page.contains("env: `LONGREAD_API_KEY`"), "an env var");
    assert!(!page.contains("- `-h, --help`"), "clap's own flags are left out");
}

#[test]
fn man_pages_and_completions_are_written() {
    let tmp = tempfile::tempdir().unwrap();
    let man = tmp.path().join("man");
    let completions = tmp.path().join("completions");
    let out = longread(&["reference", "--man", man.to_str().unwrap(), "--completions", completions.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page = std::fs::read_to_string(man.join("longread-train.1")).unwrap();
    assert!(page.starts_with(".ie") || page.contains(".TH"), "a roff page: {}", &page[..page.len().min(200)]);
    assert!(page.contains("freeze\\-base"), "train's flags are on its page");
    assert!(man.join("longread-tokenizer-train.1").is_file(), "nested commands get pages");
    for file in ["longread.bash", "_longread", "longread.fish", "longread.elv", "_longread.ps1"] {
        let text = std::fs::read_to_string(completions.join(file)).unwrap();
        assert!(text.contains("vector-cache"), "{file} completes train's flags");
    }
    // The bash completion is a script bash accepts.
    let check = std::process::Command::new("bash").arg("-n").arg(completions.join("longread.bash")).output();
    if let Ok(check) = check {
        assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    }
}

#[test]
fn nothing_to_write_is_an_error() {
    assert_clean_failure(&longread(&["reference"]), "nothing to write");
}
