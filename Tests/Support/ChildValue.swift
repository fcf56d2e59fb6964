extension Task where Failure == Never {
    /// The task's value, awaited as a child's would be: when the awaiting task is cancelled (a
    /// test's time limit runs out), this task is cancelled too. An unstructured task that waits on
    /// a `ManualClock` nobody advances then ends, and the test fails, instead of holding the whole
    /// test run for ever (a time limit cannot end an `await task.value`).
    package var childValue: Success {
        get async {
            await withTaskCancellationHandler { await value } onCancel: { cancel() }
        }
    }
}

extension Task where Failure == any Error {
    /// The task's value, awaited as a child's would be: when the awaiting task is cancelled (a
    /// test's time limit runs out), this task is cancelled too (see the non-throwing form).
    package var childValue: Success {
        get async throws {
            try await withTaskCancellationHandler { try await value } onCancel: { cancel() }
        }
    }
}
