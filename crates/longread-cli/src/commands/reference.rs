//! `longread reference`: the command reference, made from the command-line definitions
//! themselves, so that it cannot drift from them: a markdown page (docs/cli.md, checked by a
//! test), man pages (`clap_mangen`) and shell completions (`clap_complete`).

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Arg, ArgAction, Command};

/// Flags of `longread reference`.
#[derive(Debug, clap::Args)]
pub struct ReferenceArgs {
    /// Write the markdown reference of every command and flag to this file (the repository
    /// keeps it as docs/cli.md).
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Write a man page per command (longread.1, longread-train.1, ...) into this directory,
    /// e.g. ~/.local/share/man/man1.
    #[arg(long, value_name = "DIR")]
    pub man: Option<PathBuf>,
    /// Write shell completions for bash, zsh, fish, elvish and PowerShell into this directory
    /// (longread.bash, _longread, longread.fish, longread.elv, _longread.ps1).
    #[arg(long, value_name = "DIR")]
    pub completions: Option<PathBuf>,
}

/// Writes what was asked for; `command` is the whole CLI.
pub fn run(args: ReferenceArgs, mut command: Command) -> Result<()> {
    if args.markdown.is_none() && args.man.is_none() && args.completions.is_none() {
        bail!("nothing to write: give --markdown FILE, --man DIR and/or --completions DIR");
    }
    command.build();
    if let Some(path) = &args.markdown {
        crate::io::write_atomically(path, markdown(&command).as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(dir) = &args.man {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        write_man_pages(&command, dir)?;
    }
    if let Some(dir) = &args.completions {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for shell in <clap_complete::Shell as clap::ValueEnum>::value_variants() {
            let mut command = command.clone();
            clap_complete::generate_to(*shell, &mut command, "longread", dir)
                .with_context(|| format!("writing {shell} completions into {}", dir.display()))?;
        }
    }
    Ok(())
}

/// One man page per command and subcommand, named as git's are (`longread-tokenizer-train.1`).
fn write_man_pages(command: &Command, dir: &std::path::Path) -> Result<()> {
    let mut pages = vec![(String::from("longread"), command.clone())];
    let mut i = 0;
    while i < pages.len() {
        let (name, cmd) = pages[i].clone();
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
            pages.push((format!("{name}-{}", sub.get_name()), sub.clone()));
        }
        i += 1;
    }
    for (name, cmd) in pages {
        let mut buffer = Vec::new();
        let page_name: &'static str = Box::leak(name.clone().into_boxed_str());
        clap_mangen::Man::new(cmd.name(page_name)).render(&mut buffer)?;
        let path = dir.join(format!("{name}.1"));
        crate::io::write_atomically(&path, &buffer).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The markdown page: the global flags, then each command (in the order `--help` lists them)
/// with its description, usage and flags.
pub fn markdown(command: &Command) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Command reference\n");
    let _ = writeln!(
        out,
        "Generated from the code by `longread reference --markdown docs/cli.md`; a test fails when this page \
         differs from what the code says. Every command also has `--help`.\n"
    );
    let commands: Vec<&Command> = visible_subcommands(command).collect();
    for sub in &commands {
        let _ = writeln!(out, "- [`longread {}`](#longread-{}): {}", sub.get_name(), sub.get_name(), first_line(sub));
    }
    let _ = writeln!(out, "\n## Global options\n");
    let _ = writeln!(out, "Taken by every command, before or after its name.\n");
    for arg in command.get_arguments().filter(|a| shown(a) && a.is_global_set()) {
        option(&mut out, arg);
    }
    for sub in commands {
        section(&mut out, sub, &format!("longread {}", sub.get_name()), 2);
    }
    out
}

fn visible_subcommands(command: &Command) -> impl Iterator<Item = &Command> {
    command.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help")
}

fn section(out: &mut String, command: &Command, path: &str, depth: usize) {
    let _ = writeln!(out, "\n{} `{path}`\n", "#".repeat(depth));
    let about = command.get_long_about().or(command.get_about()).map(|s| s.to_string()).unwrap_or_default();
    if !about.is_empty() {
        let _ = writeln!(out, "{}\n", about.trim());
    }
    let usage = command.clone().render_usage().to_string();
    let usage = usage.trim().trim_start_matches("Usage:").trim();
    let _ = writeln!(out, "```text\n{usage}\n```\n");
    let positionals: Vec<&Arg> = command.get_positionals().filter(|a| shown(a)).collect();
    let options: Vec<&Arg> =
        command.get_arguments().filter(|a| shown(a) && !a.is_positional() && !a.is_global_set()).collect();
    if !positionals.is_empty() {
        let _ = writeln!(out, "Arguments:\n");
        for arg in positionals {
            option(out, arg);
        }
        out.push('\n');
    }
    if !options.is_empty() {
        let _ = writeln!(out, "Options:\n");
        for arg in options {
            option(out, arg);
        }
    }
    for sub in visible_subcommands(command) {
        section(out, sub, &format!("{path} {}", sub.get_name()), depth + 1);
    }
}

/// Whether an argument belongs on the page (clap's own --help and --version do not).
fn shown(arg: &Arg) -> bool {
    !arg.is_hide_set() && !matches!(arg.get_action(), ArgAction::Help | ArgAction::HelpLong | ArgAction::Version)
}

/// One bullet: the flag's spelling, then what is required, its default, env var and values,
/// then its help text.
fn option(out: &mut String, arg: &Arg) {
    let mut name = String::new();
    if arg.is_positional() {
        name.push_str(&value_names(arg));
    } else {
        if let Some(short) = arg.get_short() {
            let _ = write!(name, "-{short}, ");
        }
        if let Some(long) = arg.get_long() {
            let _ = write!(name, "--{long}");
        }
        if arg.get_action().takes_values() {
            let _ = write!(name, " {}", value_names(arg));
        }
    }
    let mut facts = Vec::new();
    if arg.is_required_set() {
        facts.push("required".to_string());
    }
    let defaults: Vec<String> = arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
    if !defaults.is_empty() && arg.get_action().takes_values() {
        facts.push(format!("default: `{}`", defaults.join(",")));
    }
    if let Some(env) = arg.get_env() {
        facts.push(format!("env: `{}`", env.to_string_lossy()));
    }
    let values: Vec<String> =
        arg.get_possible_values().iter().filter(|v| !v.is_hide_set()).map(|v| format!("`{}`", v.get_name())).collect();
    if !values.is_empty() && arg.get_action().takes_values() {
        facts.push(format!("one of {}", values.join(", ")));
    }
    if let Some(aliases) = arg.get_visible_aliases() {
        facts.push(format!("also {}", aliases.iter().map(|a| format!("`--{a}`")).collect::<Vec<_>>().join(", ")));
    }
    let help = arg.get_long_help().or(arg.get_help()).map(|s| s.to_string()).unwrap_or_default();
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    let facts = if facts.is_empty() { String::new() } else { format!(" ({})", facts.join("; ")) };
    let _ = writeln!(out, "- `{name}`{facts}: {help}");
}

fn value_names(arg: &Arg) -> String {
    match arg.get_value_names() {
        Some(names) if !names.is_empty() => names.iter().map(|n| format!("<{n}>")).collect::<Vec<_>>().join(" "),
        _ => format!("<{}>", arg.get_id().as_str().to_uppercase()),
    }
}

/// The first sentence of a command's description: up to a full stop that ends a sentence (one
/// followed by a capital letter, so that "e.g. a" does not end it).
fn first_line(command: &Command) -> String {
    let about = command.get_about().map(|s| s.to_string()).unwrap_or_default();
    let about = about.split_whitespace().collect::<Vec<_>>().join(" ");
    let bytes = about.as_bytes();
    let end = (0..bytes.len().saturating_sub(2))
        .find(|&i| bytes[i] == b'.' && bytes[i + 1] == b' ' && bytes[i + 2].is_ascii_uppercase())
        .unwrap_or(about.len());
    about[..end].trim_end_matches('.').to_string()
}
