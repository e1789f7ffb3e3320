//! The `parley` binary; everything lives in the library so tests can drive it.

fn main() -> std::process::ExitCode {
    parley::cli::main()
}
