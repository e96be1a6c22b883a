//! The `sluice` binary: everything is [`sluice::run`].

fn main() -> std::process::ExitCode {
    sluice::run()
}
