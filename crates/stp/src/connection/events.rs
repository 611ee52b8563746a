//! The events a connection holds for the application, oldest first, in six bytes: each waiting
//! event is a kind (the error of `Failed` is the connection's own, kept in its phase). A
//! `Readable` or `Writable` that is already waiting is not queued a second time (it would tell the
//! application nothing new), and every other kind happens at most once in a connection's life, so
//! at most one event of each kind waits and the queue never needs the heap.

/// What happened, without the failure's detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EventKind {
    Connected,
    Readable,
    Writable,
    PeerFinished,
    Closed,
    Failed,
}

/// Kinds of [`EventKind`]: the most events that can wait at once.
const KINDS: usize = 6;

/// The waiting events, oldest first, packed at the front.
#[derive(Debug, Default)]
pub(super) struct EventQueue {
    waiting: [Option<EventKind>; KINDS],
}

impl EventQueue {
    /// Queues `kind` unless an event of that kind is already waiting.
    pub fn push(&mut self, kind: EventKind) {
        for slot in &mut self.waiting {
            match slot {
                Some(k) if *k == kind => return,
                Some(_) => {}
                None => {
                    *slot = Some(kind);
                    return;
                }
            }
        }
    }

    /// Takes the oldest waiting event.
    pub fn pop(&mut self) -> Option<EventKind> {
        let first = self.waiting[0]?;
        self.waiting.rotate_left(1);
        self.waiting[KINDS - 1] = None;
        Some(first)
    }

    pub fn is_empty(&self) -> bool {
        self.waiting[0].is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_out_in_order_and_a_waiting_kind_is_not_repeated() {
        let mut q = EventQueue::default();
        assert!(q.is_empty());
        q.push(EventKind::Connected);
        q.push(EventKind::Readable);
        q.push(EventKind::Writable);
        q.push(EventKind::Readable);
        assert_eq!(q.pop(), Some(EventKind::Connected));
        assert_eq!(q.pop(), Some(EventKind::Readable));
        q.push(EventKind::Readable);
        q.push(EventKind::PeerFinished);
        q.push(EventKind::Closed);
        q.push(EventKind::Failed);
        assert_eq!(q.pop(), Some(EventKind::Writable));
        assert_eq!(q.pop(), Some(EventKind::Readable));
        assert_eq!(q.pop(), Some(EventKind::PeerFinished));
        assert_eq!(q.pop(), Some(EventKind::Closed));
        assert_eq!(q.pop(), Some(EventKind::Failed));
        assert_eq!(q.pop(), None);
        assert!(q.is_empty());
    }
}
