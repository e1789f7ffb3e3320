//! Where the command line's text goes. A reader that stops reading (`parley … | head` once
//! head has its lines) is the reader's choice, not a failure: [`out!`] turns the write error
//! into [`CliError::Output`], which [`super::main`] ends with status 0 and no message when the
//! pipe is broken. [`note!`] writes progress and diagnostics to stderr on a best-effort basis:
//! a closed stderr drops them.
//!
//! `println!` panics on a closed stdout, so the crate's `clippy.toml` disallows it.

use std::io::Write as _;

use super::CliError;

/// Prints one line on stdout (`println!`'s arguments) and returns from the enclosing function
/// with [`CliError::Output`] when the line cannot be written.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::output::line(format_args!($($arg)*))?
    };
}

/// Prints one line on stderr (`eprintln!`'s arguments), dropping it when stderr is closed.
macro_rules! note {
    ($($arg:tt)*) => {
        $crate::cli::output::note(format_args!($($arg)*))
    };
}

/// Writes `args` and a newline to stdout.
pub(crate) fn line(args: std::fmt::Arguments<'_>) -> Result<(), CliError> {
    writeln!(std::io::stdout().lock(), "{args}").map_err(CliError::Output)
}

/// Writes `args` and a newline to stderr, if it can.
pub(crate) fn note(args: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{args}");
}

/// Whether `error` only says that nobody reads the output any more.
pub(crate) fn reader_gone(error: &CliError) -> bool {
    matches!(error, CliError::Output(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
}
