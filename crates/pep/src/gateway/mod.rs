//! The gateway's side of a connection: serving the streams terminals open (admission, stream
//! header, policy, connect, verdict, relay).

#[cfg(feature = "runtime")]
pub mod connect;
pub mod policy;
#[cfg(feature = "runtime")]
pub mod serve;
