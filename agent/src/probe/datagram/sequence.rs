//! Which echo a datagram's sequence number makes it: the first echo of a datagram still
//! awaited (and whether a later datagram's echo came before it), a duplicate of one already
//! echoed, or a late one whose request had timed out. Pure.

/// Sequence numbers remembered as echoed: far more than a target has in flight (rate times
/// timeout), so that an echo older than this is late in any case.
pub const WINDOW: u64 = 1 << 16;

/// What one echo was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// The first echo of an awaited datagram; `reordered` when a later datagram's echo came
    /// first.
    First {
        /// A later datagram was echoed before it.
        reordered: bool,
    },
    /// The datagram was echoed before.
    Duplicate,
    /// The datagram's request had timed out.
    Late,
    /// A sequence number never sent.
    Unknown,
}

/// The echoes of one stream.
#[derive(Clone, Debug)]
pub struct Book {
    echoed: Vec<u64>,
    next: u64,
    highest_echoed: Option<u64>,
    /// Echoes of a datagram echoed before.
    pub duplicates: u64,
    /// Echoes after their request's timeout.
    pub late: u64,
}

impl Default for Book {
    fn default() -> Self {
        Book {
            echoed: vec![0; (WINDOW / 64) as usize],
            next: 0,
            highest_echoed: None,
            duplicates: 0,
            late: 0,
        }
    }
}

impl Book {
    fn bit(seq: u64) -> (usize, u64) {
        let slot = seq % WINDOW;
        ((slot / 64) as usize, 1 << (slot % 64))
    }

    /// The next sequence number to send (numbers are sent in order).
    pub fn send(&mut self) -> u64 {
        let seq = self.next;
        self.next += 1;
        let (word, mask) = Self::bit(seq);
        self.echoed[word] &= !mask;
        seq
    }

    /// Classifies an echo of `seq`; `awaited` says its request is still waiting for it.
    pub fn arrive(&mut self, seq: u64, awaited: bool) -> Arrival {
        if seq >= self.next {
            return Arrival::Unknown;
        }
        let in_window = self.next - seq <= WINDOW;
        let (word, mask) = Self::bit(seq);
        if awaited && in_window {
            self.echoed[word] |= mask;
            let reordered = self.highest_echoed.is_some_and(|h| h > seq);
            self.highest_echoed = Some(self.highest_echoed.map_or(seq, |h| h.max(seq)));
            return Arrival::First { reordered };
        }
        if in_window && self.echoed[word] & mask != 0 {
            self.duplicates += 1;
            Arrival::Duplicate
        } else {
            self.late += 1;
            Arrival::Late
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_reordered_duplicate_late_and_unknown_echoes_are_told_apart() {
        let mut book = Book::default();
        let seqs: Vec<u64> = (0..4).map(|_| book.send()).collect();
        assert_eq!(seqs, [0, 1, 2, 3]);
        assert_eq!(book.arrive(0, true), Arrival::First { reordered: false });
        assert_eq!(book.arrive(2, true), Arrival::First { reordered: false });
        assert_eq!(book.arrive(1, true), Arrival::First { reordered: true });
        assert_eq!(book.arrive(2, false), Arrival::Duplicate);
        // 3 timed out before its echo came.
        assert_eq!(book.arrive(3, false), Arrival::Late);
        assert_eq!(book.arrive(9, false), Arrival::Unknown);
        assert_eq!((book.duplicates, book.late), (1, 1));
    }

    #[test]
    fn a_number_reused_after_the_window_is_not_a_duplicate_of_its_namesake() {
        let mut book = Book::default();
        let first = book.send();
        assert_eq!(
            book.arrive(first, true),
            Arrival::First { reordered: false }
        );
        for _ in 1..WINDOW {
            book.send();
        }
        // The slot of 0 is reused by WINDOW: its echo is awaited afresh.
        let again = book.send();
        assert_eq!(again, WINDOW);
        assert_eq!(book.arrive(again, false), Arrival::Late);
        // An echo older than the window cannot be told from a duplicate: it is late.
        assert_eq!(book.arrive(first, false), Arrival::Late);
        assert_eq!(book.duplicates, 0);
    }
}
