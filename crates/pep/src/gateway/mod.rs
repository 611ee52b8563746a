//! The gateway's side of a connection: serving the streams terminals open (admission, stream
//! header, policy, connect, verdict, relay).

pub mod connect;
pub mod policy;
pub mod serve;
