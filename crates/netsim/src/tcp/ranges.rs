//! A bounded set of disjoint byte ranges `[start, end)` of sequence space: the receiver's
//! out-of-order data and the sender's SACK scoreboard.

/// Disjoint, non-adjacent ranges in increasing order, at most `limit` of them.
#[derive(Debug, Clone)]
pub struct RangeSet {
    ranges: Vec<(u64, u64)>,
    limit: usize,
}

impl RangeSet {
    /// An empty set that holds at most `limit` separate ranges.
    pub fn new(limit: usize) -> Self {
        RangeSet {
            ranges: Vec::new(),
            limit: limit.max(1),
        }
    }

    /// Adds `[start, end)`, merging with overlapping or adjacent ranges. Returns false (and adds
    /// nothing) when that would need more than `limit` ranges.
    pub fn insert(&mut self, start: u64, end: u64) -> bool {
        if start >= end {
            return true;
        }
        // First range that ends at or after `start` (could merge), and the first that starts
        // after `end` (cannot).
        let lo = self.ranges.partition_point(|&(_, e)| e < start);
        let hi = self.ranges.partition_point(|&(s, _)| s <= end);
        if lo == hi {
            if self.ranges.len() >= self.limit {
                return false;
            }
            self.ranges.insert(lo, (start, end));
            return true;
        }
        let merged = (start.min(self.ranges[lo].0), end.max(self.ranges[hi - 1].1));
        self.ranges.drain(lo + 1..hi);
        self.ranges[lo] = merged;
        true
    }

    /// Forgets everything below `seq`.
    pub fn remove_below(&mut self, seq: u64) {
        let n = self.ranges.partition_point(|&(_, e)| e <= seq);
        self.ranges.drain(..n);
        if let Some(first) = self.ranges.first_mut() {
            first.0 = first.0.max(seq);
        }
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.ranges.clear();
    }

    /// The range holding `seq`, if any.
    pub fn containing(&self, seq: u64) -> Option<(u64, u64)> {
        let i = self.ranges.partition_point(|&(_, e)| e <= seq);
        self.ranges.get(i).copied().filter(|&(s, _)| s <= seq)
    }

    /// Start of the first range beginning after `seq`.
    pub fn next_start_after(&self, seq: u64) -> Option<u64> {
        let i = self.ranges.partition_point(|&(s, _)| s <= seq);
        self.ranges.get(i).map(|&(s, _)| s)
    }

    /// Bytes covered by the ranges at or above `seq`.
    pub fn bytes_above(&self, seq: u64) -> u64 {
        self.ranges
            .iter()
            .map(|&(s, e)| e.saturating_sub(s.max(seq)))
            .sum()
    }

    /// End of the highest range.
    pub fn max_end(&self) -> Option<u64> {
        self.ranges.last().map(|&(_, e)| e)
    }

    /// The lowest range.
    pub fn first(&self) -> Option<(u64, u64)> {
        self.ranges.first().copied()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The ranges in increasing order.
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(r: &RangeSet) -> Vec<(u64, u64)> {
        r.iter().collect()
    }

    #[test]
    fn insert_merges_and_bounds() {
        let mut r = RangeSet::new(3);
        assert!(r.insert(10, 20));
        assert!(r.insert(30, 40));
        assert!(r.insert(50, 60));
        assert!(!r.insert(70, 80), "a fourth range is refused");
        assert!(r.insert(20, 30), "adjacent ranges merge");
        assert_eq!(set(&r), vec![(10, 40), (50, 60)]);
        assert!(r.insert(5, 55));
        assert_eq!(set(&r), vec![(5, 60)]);
        assert!(r.insert(7, 9), "a subset changes nothing");
        assert_eq!(set(&r), vec![(5, 60)]);
    }

    #[test]
    fn queries_and_pruning() {
        let mut r = RangeSet::new(10);
        r.insert(10, 20);
        r.insert(30, 40);
        assert_eq!(r.containing(10), Some((10, 20)));
        assert_eq!(r.containing(20), None);
        assert_eq!(r.containing(39), Some((30, 40)));
        assert_eq!(r.next_start_after(10), Some(30));
        assert_eq!(r.next_start_after(5), Some(10));
        assert_eq!(r.next_start_after(30), None);
        assert_eq!(r.max_end(), Some(40));
        r.remove_below(15);
        assert_eq!(set(&r), vec![(15, 20), (30, 40)]);
        r.remove_below(35);
        assert_eq!(set(&r), vec![(35, 40)]);
        r.remove_below(40);
        assert!(r.is_empty());
    }
}
