package dev.scorestream.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.scorestream.jvm.PartitionTransactions.Progress;
import org.junit.jupiter.api.Test;

/**
 * What a transaction writes of a partition read again, and the offset it commits. The Kafka side
 * (fencing, the committed-offset lookup, the commit itself) needs a broker:
 * {@link PartitionTransactionsBrokerTest}, and the real job in tests/test_exactly_once.py.
 */
class PartitionTransactionsTest {
  @Test
  void aPartitionNeverCommittedWritesEveryRecordAndCommitsPastTheLast() {
    Progress p = new Progress(-1);
    assertFalse(p.wrote());
    assertTrue(p.admit(0));
    assertTrue(p.admit(1));
    assertTrue(p.admit(7)); // a gap (a record of an aborted transaction, a compacted one) is no matter
    assertEquals(8, p.next());
  }

  @Test
  void aBatchReadAgainWritesOnlyWhatNoTransactionCommitted() {
    Progress p = new Progress(100); // records 0..99 were committed before the failure
    assertFalse(p.admit(90));
    assertFalse(p.admit(99));
    assertFalse(p.wrote());
    assertTrue(p.admit(100));
    assertTrue(p.admit(101));
    assertEquals(102, p.next());
  }

  @Test
  void aBatchWhollyCommittedBeforeHasNothingToCommit() {
    Progress p = new Progress(50);
    for (long o = 10; o < 50; o++) assertFalse(p.admit(o));
    assertFalse(p.wrote());
    assertThrows(IllegalStateException.class, p::next); // so it aborts instead: the group stays at 50
  }

  @Test
  void theCommittedOffsetNeverGoesBack() {
    Progress p = new Progress(-1);
    p.admit(5);
    p.admit(3);
    assertEquals(6, p.next());
  }

  @Test
  void eachInputPartitionHasItsOwnTransactionalId() {
    assertEquals("scorestream.ns.job.tx.data-0", PartitionTransactions.transactionalId("scorestream.ns.job.tx.data", 0));
    assertEquals("scorestream.ns.job.tx.data-12", PartitionTransactions.transactionalId("scorestream.ns.job.tx.data", 12));
  }
}
