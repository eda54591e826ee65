//! A serving endpoint's UDP socket with the [`DatagramFilter`] between the kernel and quinn:
//! every datagram read is judged, and the dropped ones are cut out of the batch before quinn
//! parses it (counted in [`TransportStats`]).

use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};

use super::filter::{DatagramFilter, FilterConfig, Verdict};
use crate::transport::stats::TransportStats;

/// quinn's socket, filtered on receive; sends pass through.
pub struct FilteredSocket {
    inner: Arc<dyn AsyncUdpSocket>,
    filter: Mutex<DatagramFilter>,
    stats: Arc<TransportStats>,
}

impl FilteredSocket {
    /// `inner` filtered with `config`'s limits, counting into `stats`.
    pub fn wrap(
        inner: Arc<dyn AsyncUdpSocket>,
        config: FilterConfig,
        stats: Arc<TransportStats>,
    ) -> Arc<dyn AsyncUdpSocket> {
        let filter = DatagramFilter::new(config, tokio::time::Instant::now());
        Arc::new(FilteredSocket {
            inner,
            filter: Mutex::new(filter),
            stats,
        })
    }

    /// Judges the datagrams of one received buffer (several of `stride` bytes each when the
    /// kernel coalesced them), moves the passing ones to its front and returns their length.
    fn keep_passing(&self, filter: &mut DatagramFilter, meta: &RecvMeta, buf: &mut [u8]) -> usize {
        let now = tokio::time::Instant::now();
        let len = meta.len.min(buf.len());
        let stride = if meta.stride == 0 { len } else { meta.stride };
        let (mut kept, mut at) = (0, 0);
        while at < len {
            let end = (at + stride).min(len);
            match filter.handle_datagram(now, meta.addr, &buf[at..end]) {
                Verdict::Pass => {
                    buf.copy_within(at..end, kept);
                    kept += end - at;
                }
                Verdict::UnknownVersion => {
                    TransportStats::bump(&self.stats.datagrams_dropped_unknown_version)
                }
                Verdict::InitialOverBudget => {
                    TransportStats::bump(&self.stats.datagrams_dropped_initial_budget)
                }
            }
            at = end;
        }
        kept
    }
}

impl fmt::Debug for FilteredSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FilteredSocket")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl AsyncUdpSocket for FilteredSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let received = ready!(self.inner.poll_recv(cx, bufs, meta))?;
        let mut filter = self.filter.lock().expect("datagram filter lock");
        for (meta, buf) in meta.iter_mut().zip(bufs.iter_mut()).take(received) {
            // A buffer left empty is skipped by quinn.
            meta.len = self.keep_passing(&mut filter, meta, buf);
        }
        Poll::Ready(Ok(received))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}
