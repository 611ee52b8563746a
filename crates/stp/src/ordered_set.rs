//! The endpoint's ordered sets of connections (to poll, with events, with a stale deadline, by
//! deadline): a sorted vector while small, a B-tree once large.
//!
//! An endpoint serving one or a few connections (the simulator's agents, a terminal with a
//! handful of flows) moves each connection in and out of these sets several times per datagram;
//! in a vector of a few entries that is a short binary search and a move of a few words, where a
//! B-tree walks and rebalances nodes. A gateway with thousands of connections keeps the B-tree's
//! logarithmic cost. Both give the same order, so the endpoint behaves the same either way.

use std::collections::BTreeSet;

/// Entries above which the set becomes a B-tree.
const SMALL_MAX: usize = 32;
/// Entries at or below which a B-tree set becomes a vector again (below `SMALL_MAX`, so a set
/// hovering around the limit does not convert back and forth).
const SMALL_AGAIN: usize = 8;

#[derive(Debug, Clone)]
enum Repr<T> {
    /// Sorted, no duplicates, at most `SMALL_MAX` entries.
    Small(Vec<T>),
    Large(BTreeSet<T>),
}

/// A set of `T` in ascending order, with the operations the endpoint needs.
#[derive(Debug, Clone)]
pub(crate) struct OrderedSet<T> {
    repr: Repr<T>,
}

impl<T: Ord + Copy> Default for OrderedSet<T> {
    fn default() -> Self {
        OrderedSet {
            repr: Repr::Small(Vec::new()),
        }
    }
}

impl<T: Ord + Copy> OrderedSet<T> {
    /// Adds `t`; whether it was absent.
    #[inline]
    pub fn insert(&mut self, t: T) -> bool {
        match &mut self.repr {
            Repr::Small(v) => {
                // The usual cases, without a search: already the last entry (often the only
                // one), or after every entry.
                match v.last().copied() {
                    Some(last) if last == t => return false,
                    Some(last) if last < t && v.len() < SMALL_MAX => {
                        v.push(t);
                        return true;
                    }
                    None => {
                        v.push(t);
                        return true;
                    }
                    _ => {}
                }
                self.insert_searching(t)
            }
            Repr::Large(s) => s.insert(t),
        }
    }

    /// [`Self::insert`] by binary search.
    fn insert_searching(&mut self, t: T) -> bool {
        match &mut self.repr {
            Repr::Small(v) => match v.binary_search(&t) {
                Ok(_) => false,
                Err(i) => {
                    if v.len() < SMALL_MAX {
                        v.insert(i, t);
                    } else {
                        let mut set: BTreeSet<T> = v.drain(..).collect();
                        set.insert(t);
                        self.repr = Repr::Large(set);
                    }
                    true
                }
            },
            Repr::Large(s) => s.insert(t),
        }
    }

    /// Removes `t`; whether it was present.
    #[inline]
    pub fn remove(&mut self, t: &T) -> bool {
        let removed = match &mut self.repr {
            Repr::Small(v) if v.last() == Some(t) => {
                v.pop();
                true
            }
            Repr::Small(v) => match v.binary_search(t) {
                Ok(i) => {
                    // The last (often the only) entry: nothing to shift.
                    if i + 1 == v.len() {
                        v.pop();
                    } else {
                        v.remove(i);
                    }
                    true
                }
                Err(_) => false,
            },
            Repr::Large(s) => s.remove(t),
        };
        if removed {
            self.shrink();
        }
        removed
    }

    /// The smallest entry.
    #[inline]
    pub fn first(&self) -> Option<T> {
        match &self.repr {
            Repr::Small(v) => v.first().copied(),
            Repr::Large(s) => s.first().copied(),
        }
    }

    /// Removes and returns the smallest entry.
    #[inline]
    pub fn pop_first(&mut self) -> Option<T> {
        let t = match &mut self.repr {
            Repr::Small(v) => {
                if v.len() <= 1 {
                    v.pop()
                } else {
                    Some(v.remove(0))
                }
            }
            Repr::Large(s) => s.pop_first(),
        };
        if t.is_some() {
            self.shrink();
        }
        t
    }

    /// The smallest entry at or after `from`.
    #[inline]
    pub fn first_from(&self, from: T) -> Option<T> {
        match &self.repr {
            Repr::Small(v) => {
                let i = v.partition_point(|x| *x < from);
                v.get(i).copied()
            }
            Repr::Large(s) => s.range(from..).next().copied(),
        }
    }

    /// Number of entries.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Small(v) => v.len(),
            Repr::Large(s) => s.len(),
        }
    }

    /// A B-tree set that has become small turns back into a vector.
    #[inline]
    fn shrink(&mut self) {
        if let Repr::Large(s) = &mut self.repr {
            if s.len() <= SMALL_AGAIN {
                let v: Vec<T> = std::mem::take(s).into_iter().collect();
                self.repr = Repr::Small(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::{RngCore, SeedableRng};

    /// Random inserts, removals and queries give what a `BTreeSet` gives, across the switches
    /// between the two representations in both directions.
    #[test]
    fn behaves_like_a_btree_set_through_growth_and_shrinking() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut ours = OrderedSet::<u64>::default();
        let mut model = BTreeSet::<u64>::new();
        let mut was_large = false;
        let mut small_again = false;
        for round in 0..20_000u32 {
            // Phases that grow the set well past the limit, then drain it.
            let growing = (round / 2_000) % 2 == 0;
            let x = rng.next_u64() % 100;
            match rng.next_u32() % 6 {
                0..=2 if growing => assert_eq!(ours.insert(x), model.insert(x)),
                0..=2 => assert_eq!(ours.remove(&x), model.remove(&x)),
                3 => assert_eq!(ours.pop_first(), model.pop_first()),
                4 => assert_eq!(ours.first_from(x), model.range(x..).next().copied()),
                _ => assert_eq!(ours.remove(&x), model.remove(&x)),
            }
            assert_eq!(ours.first(), model.first().copied());
            assert_eq!(ours.len(), model.len());
            match ours.repr {
                Repr::Large(_) => was_large = true,
                Repr::Small(_) if was_large => small_again = true,
                Repr::Small(_) => {}
            }
        }
        assert!(was_large && small_again, "both switches were exercised");
    }
}
