//! A pass-through body stream that reports, once it has ended, what answer it carried.
//!
//! Chunks go to the client as soon as the regional tier sends them (nothing is buffered); a copy of each
//! is fed to an [`SseReader`]. At the end of the body the reader's verdict goes out on a oneshot channel,
//! which the edge's `wait_until` task awaits before it fills the cache. If the client disconnects or the
//! upstream body fails, the sender is dropped or sent `None`, and nothing is cached.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::channel::oneshot;
use futures::stream::{Stream, StreamExt};

use crate::sse::{SseReader, StreamedAnswer};

/// The body stream: yields the inner chunks unchanged.
pub struct ObservedStream<S> {
    /// The regional body.
    inner: Pin<Box<S>>,
    /// Reads the events passing through.
    reader: Option<SseReader>,
    /// Told the outcome once, at the end.
    done: Option<oneshot::Sender<Option<StreamedAnswer>>>,
}

impl<S> ObservedStream<S> {
    /// Wraps `inner`; the returned receiver resolves when the body has ended.
    pub fn new(inner: S) -> (Self, oneshot::Receiver<Option<StreamedAnswer>>) {
        let (tx, rx) = oneshot::channel();
        (Self { inner: Box::pin(inner), reader: Some(SseReader::default()), done: Some(tx) }, rx)
    }

    fn report(&mut self, answer: Option<StreamedAnswer>) {
        if let Some(tx) = self.done.take() {
            // The receiver is gone only if the fill task was dropped; nothing to do then.
            let _ = tx.send(answer);
        }
    }
}

impl<S, E> Stream for ObservedStream<S>
where
    S: Stream<Item = Result<Vec<u8>, E>>,
{
    type Item = Result<Vec<u8>, E>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let item = match self.inner.poll_next_unpin(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(item) => item,
        };
        match &item {
            Some(Ok(chunk)) => {
                if let Some(reader) = self.reader.as_mut() {
                    reader.feed(chunk);
                }
            }
            Some(Err(_)) => {
                self.reader = None;
                self.report(None);
            }
            None => {
                let answer = self.reader.take().and_then(SseReader::finish);
                self.report(answer);
            }
        }
        Poll::Ready(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use futures::stream;

    const SSE: &str = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n\
        data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";

    #[test]
    fn passes_chunks_through_and_reports_at_the_end() {
        let chunks: Vec<Result<Vec<u8>, ()>> = SSE.as_bytes().chunks(10).map(|c| Ok(c.to_vec())).collect();
        let (observed, rx) = ObservedStream::new(stream::iter(chunks));
        let out: Vec<u8> = block_on(observed.map(|c| c.expect("chunk")).concat());
        assert_eq!(out, SSE.as_bytes());
        let answer = block_on(rx).expect("sent").expect("complete");
        assert_eq!((answer.content.as_str(), answer.finish_reason.as_str()), ("Hi", "stop"));
    }

    #[test]
    fn reports_nothing_on_error_or_disconnect() {
        let failing: Vec<Result<Vec<u8>, ()>> = vec![Ok(SSE.as_bytes()[..20].to_vec()), Err(())];
        let (observed, rx) = ObservedStream::new(stream::iter(failing));
        let _ = block_on(observed.collect::<Vec<_>>());
        assert_eq!(block_on(rx), Ok(None));

        let whole: Vec<Result<Vec<u8>, ()>> = vec![Ok(SSE.as_bytes().to_vec())];
        let (mut observed, rx) = ObservedStream::new(stream::iter(whole));
        let _ = block_on(observed.next());
        drop(observed);
        assert!(block_on(rx).is_err(), "client went away before the end");
    }
}
