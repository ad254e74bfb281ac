//! `flexkv`: the command-line tool for flexkv databases.
//!
//! The engine's key-value layer does not exist yet (see the README's status), so for now
//! the tool only reports its version and explains itself; `get`, `put`, `scan`, `load` and
//! `dump` arrive with the database.

use clap::{Parser, Subcommand};

/// flexkv: a persistent key-value storage engine that keeps data sorted in place.
///
/// The database commands (get, put, del, scan, load, dump) arrive with the key-value
/// layer; today the engine provides FlexTree and the file-system layer as a library.
#[derive(Parser, Debug)]
#[command(name = "flexkv", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug, PartialEq, Eq)]
enum Command {
    /// Print the version of flexkv and of its on-disk formats.
    Version,
}

fn version_text() -> String {
    format!(
        "flexkv {} (no on-disk formats yet: the first arrives with FlexSpace)",
        env!("CARGO_PKG_VERSION")
    )
}

fn main() {
    match Cli::parse().command {
        Some(Command::Version) => println!("{}", version_text()),
        None => println!(
            "flexkv {}: no database commands yet; run `flexkv help`.",
            env!("CARGO_PKG_VERSION")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn version_and_help_are_answered() {
        let version = Cli::try_parse_from(["flexkv", "--version"]).unwrap_err();
        assert_eq!(version.kind(), clap::error::ErrorKind::DisplayVersion);
        assert!(version.to_string().contains(env!("CARGO_PKG_VERSION")));
        for args in [&["flexkv", "--help"][..], &["flexkv", "help"]] {
            let help = Cli::try_parse_from(args).unwrap_err();
            assert_eq!(help.kind(), clap::error::ErrorKind::DisplayHelp, "{args:?}");
            assert!(help.to_string().contains("sorted in place"));
        }
        let cli = Cli::try_parse_from(["flexkv", "version"]).unwrap();
        assert_eq!(cli.command, Some(Command::Version));
        assert!(version_text().contains(env!("CARGO_PKG_VERSION")));
        assert!(Cli::try_parse_from(["flexkv", "get", "k"]).is_err());
    }
}
