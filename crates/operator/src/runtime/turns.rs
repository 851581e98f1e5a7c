//! Lines that take turns: one first-in-first-out line per namespace, served one item of each
//! namespace with items waiting in turn, so that one namespace's thousands of items delay
//! another namespace's item by one item of each namespace, not by all of them. The work queue
//! ([`fair`](super::fair)) and the Event publisher ([`events`](super::events)) share it.

use std::collections::{HashMap, VecDeque};

#[derive(Debug)]
pub struct Turns<T> {
    lines: HashMap<Box<str>, VecDeque<T>>,
    /// The namespaces whose line is not empty, in the order of their turns.
    turns: VecDeque<Box<str>>,
}

impl<T> Default for Turns<T> {
    fn default() -> Self {
        Self {
            lines: HashMap::new(),
            turns: VecDeque::new(),
        }
    }
}

impl<T> Turns<T> {
    /// Puts `item` at the end of `namespace`'s line.
    pub fn push(&mut self, namespace: &str, item: T) {
        match self.lines.get_mut(namespace) {
            Some(line) => line.push_back(item),
            None => {
                let namespace: Box<str> = namespace.into();
                self.lines.insert(namespace.clone(), VecDeque::from([item]));
                self.turns.push_back(namespace);
            }
        }
    }

    /// The first item of the namespace whose turn it is; that namespace goes to the back of
    /// the turns if more of its items wait.
    pub fn pop(&mut self) -> Option<T> {
        let namespace = self.turns.pop_front()?;
        let line = self.lines.get_mut(&namespace)?;
        let item = line.pop_front()?;
        if line.is_empty() {
            self.lines.remove(&namespace);
        } else {
            self.turns.push_back(namespace);
        }
        Some(item)
    }

    pub fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }
}
