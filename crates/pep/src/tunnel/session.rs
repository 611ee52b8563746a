//! One established session: the two directional keys (inside `snow`'s stateless transport),
//! the send nonce counter and the receive replay window.

use super::replay::ReplayWindow;
use super::wire::{emit_header, DATA_HEADER_LEN, MAX_PAYLOAD, TAG_LEN, TYPE_DATA};
use super::{Error, REJECT_AFTER_MESSAGES};
use snow::StatelessTransportState;

pub(crate) struct Session {
    transport: StatelessTransportState,
    /// The peer's index: written in every data datagram we send.
    pub(crate) remote_index: u32,
    send_nonce: u64,
    window: ReplayWindow,
}

impl Session {
    pub(crate) fn new(transport: StatelessTransportState, remote_index: u32) -> Self {
        Session {
            transport,
            remote_index,
            send_nonce: 0,
            window: ReplayWindow::default(),
        }
    }

    /// Appends a data datagram carrying `payload` to `out` (which is cleared first).
    pub(crate) fn seal(&mut self, payload: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        if payload.len() > MAX_PAYLOAD {
            return Err(Error::TooLarge(payload.len()));
        }
        if self.send_nonce >= REJECT_AFTER_MESSAGES {
            return Err(Error::NonceExhausted);
        }
        let nonce = self.send_nonce;
        out.clear();
        emit_header(out, TYPE_DATA, self.remote_index);
        out.extend_from_slice(&nonce.to_be_bytes());
        out.resize(DATA_HEADER_LEN + payload.len() + TAG_LEN, 0);
        let body = out.get_mut(DATA_HEADER_LEN..).ok_or(Error::Internal)?;
        match self.transport.write_message(nonce, payload, body) {
            Ok(n) if n == payload.len() + TAG_LEN => {
                self.send_nonce += 1;
                Ok(())
            }
            _ => {
                out.clear();
                Err(Error::Internal)
            }
        }
    }

    /// Decrypts a data datagram's ciphertext into `out` (cleared first). The replay window is
    /// consulted before and advanced only after the AEAD tag verified, so forged or replayed
    /// datagrams change nothing.
    pub(crate) fn open(
        &mut self,
        nonce: u64,
        ciphertext: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), Error> {
        out.clear();
        if nonce >= REJECT_AFTER_MESSAGES || !self.window.check(nonce) {
            return Err(Error::Replay(nonce));
        }
        let len = ciphertext
            .len()
            .checked_sub(TAG_LEN)
            .ok_or(Error::Malformed)?;
        out.resize(len, 0);
        match self.transport.read_message(nonce, ciphertext, out) {
            Ok(n) if n == len => {}
            _ => {
                out.clear();
                return Err(Error::AuthFailed);
            }
        }
        if !self.window.update(nonce) {
            out.clear();
            return Err(Error::Replay(nonce));
        }
        Ok(())
    }
}
