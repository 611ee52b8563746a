//! The web-page fetcher: the page, then the objects it references, every byte checked.
//!
//! Two ways of fetching, as browsers did and do: HTTP/1.1 with up to N persistent connections
//! (the page's connection and N-1 new ones; browsers open 6 per host), each taking the next
//! object when it is done with one; and HTTP/1.0 style, one new connection per object (closed by
//! the origin after it), up to N at a time. Object `i` of the page is the origin's object
//! `PAGE_KEY + i`.

use crate::client::Client;
use crate::Error;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// The origin's object number of a page's first object.
pub const PAGE_KEY: u64 = 100;
/// Parallel connections an HTTP/1.1 browser opens to one host.
pub const BROWSER_CONNECTIONS: usize = 6;

/// How the objects are fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// HTTP/1.1: up to this many persistent connections.
    Persistent { connections: usize },
    /// HTTP/1.0: a new connection per object, up to this many at a time.
    PerObject { connections: usize },
}

impl Style {
    /// What a browser does today: six persistent connections.
    pub const BROWSER: Style = Style::Persistent {
        connections: BROWSER_CONNECTIONS,
    };

    pub fn connections(self) -> usize {
        match self {
            Style::Persistent { connections } | Style::PerObject { connections } => {
                connections.max(1)
            }
        }
    }
}

/// Fetches a page whose objects have these `sizes` (the first is the page itself, fetched
/// before the others).
pub async fn fetch(client: &Client, sizes: &[u64], style: Style) -> Result<(), Error> {
    let Some((&page, objects)) = sizes.split_first() else {
        return Ok(());
    };
    let queue: Arc<Mutex<VecDeque<(u64, u64)>>> = Arc::new(Mutex::new(
        objects
            .iter()
            .zip(PAGE_KEY + 1..)
            .map(|(&n, k)| (k, n))
            .collect(),
    ));
    let next = |q: &Mutex<VecDeque<(u64, u64)>>| q.lock().ok().and_then(|mut q| q.pop_front());
    let lanes = style.connections().min(objects.len());
    let mut tasks = tokio::task::JoinSet::new();
    match style {
        Style::Persistent { .. } => {
            let mut first = client.connect().await?;
            first.get(PAGE_KEY, page).await?;
            let mut first = Some(first);
            for _ in 0..lanes {
                let (client, queue, conn) = (client.clone(), Arc::clone(&queue), first.take());
                tasks.spawn(async move {
                    let mut conn = match conn {
                        Some(c) => c,
                        None => client.connect().await?,
                    };
                    while let Some((key, n)) = next(&queue) {
                        conn.get(key, n).await?;
                    }
                    Ok::<(), Error>(())
                });
            }
        }
        Style::PerObject { .. } => {
            client.connect().await?.get_once(PAGE_KEY, page).await?;
            for _ in 0..lanes {
                let (client, queue) = (client.clone(), Arc::clone(&queue));
                tasks.spawn(async move {
                    while let Some((key, n)) = next(&queue) {
                        client.connect().await?.get_once(key, n).await?;
                    }
                    Ok::<(), Error>(())
                });
            }
        }
    }
    while let Some(done) = tasks.join_next().await {
        done.map_err(|e| Error::protocol(format!("a page fetch task failed: {e}")))??;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Route;
    use crate::origin::Origin;

    #[tokio::test]
    async fn both_styles_fetch_every_object_on_the_connections_they_should() {
        let origin = Origin::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let client = Client::new(origin.addr(), Route::Direct);
        let sizes: Vec<u64> = (0..20).map(|i| 1000 + 997 * i).collect();
        fetch(&client, &sizes, Style::BROWSER).await.unwrap();
        assert_eq!(origin.accepted(), 6, "the page's connection and five more");
        fetch(&client, &sizes, Style::PerObject { connections: 4 })
            .await
            .unwrap();
        assert_eq!(origin.accepted(), 6 + 20, "one connection per object");
        assert!(origin.errors().is_empty(), "{:?}", origin.errors());
    }
}
