/*
 * Console over the ST-LINK virtual COM port of the NUCLEO-144 boards (CMake -DMCUBERT_CONSOLE=uart):
 * USART3 on PD8 (TX) / PD9 (RX), alternate function 7, 115200 baud, 8N1, polled — text out, and
 * text in one line at a time (mcubert_platform_read_line), so mcubert_text_check reads sentences
 * typed into a terminal on the host (`screen /dev/ttyACM0 115200`, PuTTY, ...).
 *
 * Register addresses from the reference manuals: STM32F74x/F76x (RM0385 / RM0410: RCC at 0x40023800,
 * AHB1ENR.GPIODEN, APB1ENR.USART3EN; GPIOD at 0x40020C00) and STM32H7A3 (RM0455: RCC at 0x58024400,
 * AHB4ENR.GPIODEN, APB1LENR.USART3EN; GPIOD at 0x58020C00); USART3 is at 0x40004800 on both, with
 * the same register layout (ISR/ICR/RDR/TDR). The baud divisor assumes the reset clocks — USART3's
 * kernel clock is PCLK1 = HSI, 16 MHz on the F7s, 64 MHz on the H7A3 — or MCUBERT_UART_CLOCK_HZ
 * when your mcubert_platform_init() or startup sets up a PLL.
 *
 * Input ends a line at '\n' or '\r' (terminals send '\r' for Enter; the '\n' of a "\r\n" pair is
 * skipped) and the input at ^D (EOT), for a scripted session. Output turns '\n' into "\r\n".
 * Overrun (a line typed faster than the model consumes it) is cleared and the bytes lost, never a hang.
 */
#include "platform.h"

#define REG(address) (*(volatile uint32_t *)(address))

#if defined(MCUBERT_STM32H7)
#define RCC_GPIO_ENABLE REG(0x580244E0u)  /* RCC_AHB4ENR */
#define RCC_USART_ENABLE REG(0x580244E8u) /* RCC_APB1LENR */
#define GPIOD_BASE 0x58020C00u
#define RESET_UART_CLOCK_HZ 64000000u /* HSI */
#else
#define RCC_GPIO_ENABLE REG(0x40023830u)  /* RCC_AHB1ENR */
#define RCC_USART_ENABLE REG(0x40023840u) /* RCC_APB1ENR */
#define GPIOD_BASE 0x40020C00u
#define RESET_UART_CLOCK_HZ 16000000u /* HSI */
#endif

#ifndef MCUBERT_UART_CLOCK_HZ
#define MCUBERT_UART_CLOCK_HZ RESET_UART_CLOCK_HZ
#endif
#define BAUD 115200u

#define GPIOD_EN (1u << 3)
#define USART3_EN (1u << 18)
#define GPIOD_MODER REG(GPIOD_BASE + 0x00u)
#define GPIOD_AFRH REG(GPIOD_BASE + 0x24u)

#define USART3_BASE 0x40004800u
#define USART_CR1 REG(USART3_BASE + 0x00u)
#define USART_BRR REG(USART3_BASE + 0x0Cu)
#define USART_ISR REG(USART3_BASE + 0x1Cu)
#define USART_ICR REG(USART3_BASE + 0x20u)
#define USART_RDR REG(USART3_BASE + 0x24u)
#define USART_TDR REG(USART3_BASE + 0x28u)
#define CR1_UE (1u << 0)
#define CR1_RE (1u << 2)
#define CR1_TE (1u << 3)
#define ISR_ORE (1u << 3)
#define ISR_RXNE (1u << 5)
#define ISR_TXE (1u << 7)
#define ICR_ORECF (1u << 3)
#define END_OF_TRANSMISSION 0x04

static int32_t pending_newline; /* the last line ended at '\r': skip one '\n' */
static int32_t input_ended;     /* ^D seen */

void mcubert_platform_init(void)
{
    uint32_t moder, afrh;
    RCC_GPIO_ENABLE |= GPIOD_EN;
    RCC_USART_ENABLE |= USART3_EN;
    (void)RCC_USART_ENABLE; /* read back: the clock is on before the peripheral is touched */
    moder = GPIOD_MODER & ~(0xFu << 16);
    GPIOD_MODER = moder | (0xAu << 16); /* PD8, PD9: alternate function */
    afrh = GPIOD_AFRH & ~0xFFu;
    GPIOD_AFRH = afrh | 0x77u; /* AF7: USART3 */
    USART_CR1 = 0u;
    USART_BRR = (MCUBERT_UART_CLOCK_HZ + BAUD / 2u) / BAUD;
    USART_CR1 = CR1_TE | CR1_RE | CR1_UE;
}

static void put_byte(uint8_t byte)
{
    while ((USART_ISR & ISR_TXE) == 0u) {
    }
    USART_TDR = byte;
}

void mcubert_platform_write(const char *text)
{
    for (; *text != '\0'; ++text) {
        if (*text == '\n') {
            put_byte('\r');
        }
        put_byte((uint8_t)*text);
    }
}

static int32_t get_byte(void)
{
    uint32_t status;
    while (((status = USART_ISR) & ISR_RXNE) == 0u) {
        if ((status & ISR_ORE) != 0u) {
            USART_ICR = ICR_ORECF;
        }
    }
    return (int32_t)(USART_RDR & 0xFFu);
}

int32_t mcubert_platform_read_line(const char *source, uint8_t *buffer, uint32_t capacity, uint32_t *line_bytes)
{
    uint32_t stored = 0u, total = 0u;
    int32_t c;
    (void)source;
    *line_bytes = 0u;
    if (input_ended) {
        return -1;
    }
    c = get_byte();
    if (pending_newline && c == '\n') {
        c = get_byte();
    }
    pending_newline = 0;
    if (c == END_OF_TRANSMISSION) {
        input_ended = 1;
        return -1;
    }
    for (; c != '\n' && c != '\r' && c != END_OF_TRANSMISSION; c = get_byte()) {
        if (stored < capacity) {
            buffer[stored++] = (uint8_t)c;
        }
        ++total;
    }
    pending_newline = c == '\r';
    input_ended = c == END_OF_TRANSMISSION;
    *line_bytes = total;
    return (int32_t)stored;
}
