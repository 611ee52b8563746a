//! Standard output of a tool that is piped: when the reader goes away (`satstp leo list |
//! head -1`), the process ends quietly with the status a shell gives a process ended by
//! SIGPIPE (141), never a panic; any other failure to write is one error line and status 1.
//! Every line the subcommands print goes through [`outln!`] / [`out!`].

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static TEXT_TO_STDERR: AtomicBool = AtomicBool::new(false);

/// From now on the text of [`outln!`] goes to standard error: standard output carries one JSON
/// document (`--json` without a file).
pub fn text_to_stderr() {
    TEXT_TO_STDERR.store(true, Ordering::Relaxed);
}

/// The exit status of a process whose standard output was closed by its reader (128 + SIGPIPE).
pub const CLOSED_STDOUT_STATUS: i32 = 141;

/// Writes text for people: to standard output (or standard error after [`text_to_stderr`]);
/// ends the process as described in the module's doc on failure.
pub fn write(args: std::fmt::Arguments<'_>) {
    crate::progress::clear_if_shown();
    if TEXT_TO_STDERR.load(Ordering::Relaxed) {
        let _ = std::io::stderr().lock().write_fmt(args);
        return;
    }
    write_stdout(args);
}

/// Writes to standard output whatever [`text_to_stderr`] said (the JSON document).
pub fn write_stdout(args: std::fmt::Arguments<'_>) {
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_fmt(args) {
        failed(&e);
    }
}

/// Flushes standard output (after a line written without its newline).
pub fn flush() {
    if let Err(e) = std::io::stdout().lock().flush() {
        failed(&e);
    }
}

fn failed(e: &std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(CLOSED_STDOUT_STATUS);
    }
    eprintln!("error: cannot write to standard output: {e}");
    std::process::exit(1);
}

/// `println!` that ends quietly when standard output is closed (see [`crate::out`]).
macro_rules! outln {
    () => {
        $crate::out::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` that ends quietly when standard output is closed (see [`crate::out`]).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::write(format_args!($($arg)*))
    };
}
