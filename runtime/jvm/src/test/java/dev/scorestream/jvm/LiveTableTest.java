package dev.scorestream.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class LiveTableTest {
  private static final String A = RoutingTableTest.TABLE;
  private static final String B = A.replace("\"batchId\": 4", "\"batchId\": 5");

  @Test
  void batchesTakeTheTableSetBeforeThem() {
    LiveTable live = new LiveTable(A);
    assertEquals(A, live.take());
    live.set(B);
    assertEquals(B, live.take());
  }

  @Test
  void aBadTableIsRefusedOnTheDriverAndTheOldOneStays() {
    LiveTable live = new LiveTable(A);
    assertThrows(IllegalArgumentException.class, () -> live.set("{\"routes\": {}}"));
    assertEquals(A, live.take());
  }

  @Test
  void aBadFirstTableIsRefused() {
    assertThrows(IllegalArgumentException.class, () -> new LiveTable("not json"));
  }

  @Test
  void drainedOnceABatchTookTheDrainingTable() {
    LiveTable live = new LiveTable(A);
    live.drain();
    assertFalse(live.drained()); // no batch has begun since: the one before may still be writing
    assertNull(live.take());
    assertTrue(live.drained());
    live.set(B); // a table set while draining does not end it
    assertNull(live.take());
  }
}
