//! The logic of satstp's benchmarks and emulator commands, out of the binary: the contenders
//! over the emulated satellite link (`satstp bench link`: measuring, the daemons started and
//! stopped, the report's data), the gateway on loopback (`bench gateway`), the gateway under a
//! flood (`bench flood`), many held connections (`bench soak`), the STP engine alone (`bench
//! engine`), the simulator's speed (`bench sim`), LEO routing and the constellation as a packet
//! network (`bench leo`), the gateway, emulator and terminal on loopback (`demo`), the child processes they start and read, the links and commands of
//! `emulate udp` / `emulate net` (a `--leo` path's too), and the error type they share. The
//! `satstp` binary parses the flags, calls these and prints.
//!
//! The crate sits above `pep`, `linkem`, `loadgen` and `browser` (it drives all four), which is
//! why it is not part of `loadgen`: `pep`'s tests use `loadgen`, so `loadgen` cannot use `pep`.

#[macro_use]
pub mod error;
pub mod emulate;
pub mod engine;
pub mod flood;
pub mod gateway;
pub mod host;
pub mod leo;
pub mod link;
pub mod loopback;
pub mod process;
pub mod sim;
pub mod soak;

pub use error::{chain, Error, Result};
