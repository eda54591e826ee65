//! A certificate's budget of request bytes, and reading one frame within it: the length prefix is
//! read first and the whole declared length is granted before the body is read, so a client
//! that opens many streams and never finishes its frames holds at most the budget (its unread
//! bytes wait in QUIC's flow-control windows, which are bounded per connection), and no stream
//! ever holds part of the budget while waiting for the rest.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::wire::LENGTH_PREFIX_BYTES;

/// Request bytes the streams of one certificate's connections may hold at once. Clones share it.
#[derive(Debug, Clone)]
pub struct ReadBudget {
    permits: Arc<Semaphore>,
    bytes: u32,
}

impl ReadBudget {
    /// A budget of `bytes` (at most `u32::MAX`).
    pub fn new(bytes: usize) -> Self {
        let bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
        ReadBudget {
            permits: Arc::new(Semaphore::new(bytes as usize)),
            bytes,
        }
    }

    /// Waits until `len` bytes (at most the whole budget, so that a frame larger than the budget
    /// still gets read, alone) are free and holds them until the permit is dropped.
    pub async fn take(&self, len: usize) -> OwnedSemaphorePermit {
        let want = u32::try_from(len).unwrap_or(u32::MAX).min(self.bytes);
        (self.permits.clone().acquire_many_owned(want).await).expect("the budget is never closed")
    }

    /// Bytes free now.
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }
}

/// Why a request frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameReadError {
    /// The prefix declares more than the frame limit.
    #[error("request of {len} bytes exceeds the {max}-byte limit")]
    TooLong {
        /// Declared length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The stream finished before the declared length.
    #[error("request stream ended {missing} bytes short of its frame")]
    Truncated {
        /// Bytes missing.
        missing: usize,
    },
    /// The stream carries bytes after the frame.
    #[error("request stream carries bytes after its frame")]
    Trailing,
    /// The stream failed (reset, connection lost).
    #[error("request stream failed: {0}")]
    Stream(#[from] quinn::ReadError),
}

/// Reads one whole frame (prefix included) from `recv`, which must end with it. With a `budget`,
/// the declared length is taken from it before the body is read; the permit comes back with the
/// frame and should be dropped with it.
pub async fn read_frame(
    recv: &mut quinn::RecvStream,
    budget: Option<&ReadBudget>,
    max: usize,
) -> Result<(Vec<u8>, Option<OwnedSemaphorePermit>), FrameReadError> {
    let mut prefix = [0u8; LENGTH_PREFIX_BYTES];
    read_exact(recv, &mut prefix).await?;
    let len = u32::from_be_bytes(prefix) as usize;
    if len > max {
        return Err(FrameReadError::TooLong { len, max });
    }
    let permit = match budget {
        Some(budget) => Some(budget.take(LENGTH_PREFIX_BYTES + len).await),
        None => None,
    };
    let mut frame = vec![0u8; LENGTH_PREFIX_BYTES + len];
    frame[..LENGTH_PREFIX_BYTES].copy_from_slice(&prefix);
    read_exact(recv, &mut frame[LENGTH_PREFIX_BYTES..]).await?;
    match recv.read_to_end(0).await {
        Ok(_) => Ok((frame, permit)),
        Err(quinn::ReadToEndError::TooLong) => Err(FrameReadError::Trailing),
        Err(quinn::ReadToEndError::Read(err)) => Err(err.into()),
    }
}

async fn read_exact(recv: &mut quinn::RecvStream, buf: &mut [u8]) -> Result<(), FrameReadError> {
    match recv.read_exact(buf).await {
        Ok(()) => Ok(()),
        Err(quinn::ReadExactError::FinishedEarly(read)) => Err(FrameReadError::Truncated {
            missing: buf.len() - read,
        }),
        Err(quinn::ReadExactError::ReadError(err)) => Err(err.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_budget_grants_whole_lengths_and_never_more_than_itself() {
        let budget = ReadBudget::new(100);
        let a = budget.take(60).await;
        assert_eq!(budget.available(), 40);
        // 60 more do not fit until the first 60 are given back.
        let waiting = tokio::spawn({
            let budget = budget.clone();
            async move { budget.take(60).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(a);
        let b = waiting.await.unwrap();
        assert_eq!(budget.available(), 40);
        drop(b);
        // A frame larger than the budget takes all of it.
        let all = budget.take(1_000).await;
        assert_eq!(budget.available(), 0);
        drop(all);
        assert_eq!(budget.available(), 100);
    }
}
