internal import CCurl
import Dispatch
import FoundationEssentials
import Glibc
import HTTPTypes
import Synchronization
@_spi(TransportImplementation) @_spi(Tuning) import BrickRequestCore

/// A `TaskExecutor` whose jobs run on a ``CurlDriver``'s thread, between rounds of
/// `curl_multi_perform`: a task that prefers it resumes after each response with no thread hop.
final class CurlTaskExecutor: TaskExecutor {
    /// Strong: jobs enqueued after the driver's loop ended still reach it (and are sent to the
    /// global executor from there).
    private let driver: CurlDriver

    init(driver: CurlDriver) { self.driver = driver }

    func enqueue(_ job: consuming ExecutorJob) {
        driver.submit(.job(UnownedJob(job)))
    }
}
