//! Shares per source address: at most so many at once for each address that requests come
//! from, so that one Pod cannot take what the others need. An address is forgotten as soon as
//! nothing from it holds or waits for a share, so the table is as large as the clients of the
//! moment, whoever connects.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

type Table = Arc<Mutex<HashMap<IpAddr, Arc<Semaphore>>>>;

/// At most `limit` shares at once for each address.
pub(super) struct PerAddress {
    limit: usize,
    table: Table,
}

/// One share of an address; dropped, it goes back, and the address is forgotten unless another
/// share of it is held or awaited.
pub(super) struct Share {
    table: Table,
    address: IpAddr,
    permit: Option<OwnedSemaphorePermit>,
}

impl PerAddress {
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            table: Table::default(),
        }
    }

    /// The address's semaphore, and a share that forgets the address when dropped unfilled.
    fn entry(&self, address: IpAddr) -> (Arc<Semaphore>, Share) {
        let semaphore = {
            let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
            table
                .entry(address)
                .or_insert_with(|| Arc::new(Semaphore::new(self.limit)))
                .clone()
        };
        let share = Share {
            table: self.table.clone(),
            address,
            permit: None,
        };
        (semaphore, share)
    }

    /// A share of `address` now, or `None` when it holds all of its own.
    pub fn try_take(&self, address: IpAddr) -> Option<Share> {
        let (semaphore, mut share) = self.entry(address);
        share.permit = Some(semaphore.try_acquire_owned().ok()?);
        Some(share)
    }

    /// A share of `address`, once one of its own is free.
    pub async fn take(&self, address: IpAddr) -> Share {
        let (semaphore, mut share) = self.entry(address);
        share.permit = Some(semaphore.acquire_owned().await.expect("never closed"));
        share
    }

    /// The addresses known now: those holding or awaiting a share.
    #[cfg(test)]
    pub fn addresses(&self) -> usize {
        self.table.lock().unwrap().len()
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        drop(self.permit.take());
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        // The table's own reference is the last: nothing holds or awaits a share of it.
        if table
            .get(&self.address)
            .is_some_and(|semaphore| Arc::strong_count(semaphore) == 1)
        {
            table.remove(&self.address);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_gets_its_share_and_is_forgotten_once_it_holds_none() {
        let shares = PerAddress::new(2);
        let (a, b): (IpAddr, IpAddr) = ([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
        let first = shares.try_take(a).unwrap();
        let second = shares.try_take(a).unwrap();
        assert!(shares.try_take(a).is_none(), "a third of a's");
        let other = shares.try_take(b).expect("b's own share");
        assert_eq!(shares.addresses(), 2);
        drop((first, other));
        assert!(shares.try_take(a).is_some(), "a share back");
        drop(second);
        assert_eq!(shares.addresses(), 0, "nothing kept of addresses holding none");
    }
}
