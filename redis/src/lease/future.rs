//! [`GrantFuture`]: a decision that waits for Redis without a thread.
//!
//! [`ClusterLimiter::decide_async`](crate::ClusterLimiter::decide_async)
//! decides from the held lease or the refusal memo at once; otherwise its
//! request joins its group's lane (`lane.rs`) and the future holds the
//! request's slot: the lane's thread sends it in its group's next batch and
//! wakes the future's task when the batch's reply is filed. No thread
//! waits for it, and it needs no particular runtime (any executor's
//! waker).
//!
//! Dropping the future before it is ready leaves the request's slot: if
//! its batch was not yet sent, the request is not sent at all; if the
//! reply comes after, the permits it would have been granted stay in the
//! key's lease for the next request (never lost, never counted twice).

use super::grant::Grant;
use super::lane::Slot;
use super::remote::{Answer, Want};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// A slot, whatever its key type.
trait Waiting: Send + Sync {
    fn poll_answer(&self, cx: &mut Context<'_>) -> Poll<Answer>;
    fn abandon(&self);
}

impl<K: Send + Sync> Waiting for Slot<Want<K>, Answer> {
    fn poll_answer(&self, cx: &mut Context<'_>) -> Poll<Answer> {
        self.poll(cx)
    }
    fn abandon(&self) {
        Slot::abandon(self);
    }
}

enum State {
    Ready(Grant),
    Waiting(Arc<dyn Waiting>),
    Done,
}

/// The decision of
/// [`ClusterLimiter::decide_async`](crate::ClusterLimiter::decide_async):
/// ready at once when the node's held lease or its refusal memo decides,
/// else when the batch carrying the request is answered (or the request
/// is shed). `Send`, `'static`, and runtime-agnostic. Dropping it gives
/// the request up (see the method).
#[must_use = "a future does nothing unless polled"]
pub struct GrantFuture {
    state: State,
}

impl GrantFuture {
    pub(crate) fn ready(g: Grant) -> GrantFuture {
        GrantFuture {
            state: State::Ready(g),
        }
    }

    pub(crate) fn waiting<K: Send + Sync + 'static>(
        slot: Arc<Slot<Want<K>, Answer>>,
    ) -> GrantFuture {
        GrantFuture {
            state: State::Waiting(slot),
        }
    }

    /// Whether the decision was made without waiting (the future is
    /// ready at its first poll).
    pub fn is_ready(&self) -> bool {
        matches!(self.state, State::Ready(_))
    }
}

impl Future for GrantFuture {
    type Output = Grant;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Grant> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Ready(g) => Poll::Ready(g),
            State::Waiting(slot) => match slot.poll_answer(cx) {
                Poll::Ready(a) => Poll::Ready(a.grant()),
                Poll::Pending => {
                    self.state = State::Waiting(slot);
                    Poll::Pending
                }
            },
            State::Done => panic!("GrantFuture polled after it was ready"),
        }
    }
}

impl Drop for GrantFuture {
    fn drop(&mut self) {
        if let State::Waiting(slot) = &self.state {
            slot.abandon();
        }
    }
}

impl fmt::Debug for GrantFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Ready(g) => format!("Ready({g:?})"),
            State::Waiting(_) => "Waiting".to_owned(),
            State::Done => "Done".to_owned(),
        };
        f.debug_struct("GrantFuture")
            .field("state", &state)
            .finish()
    }
}
